#!/usr/bin/env python3
"""Where a kernel's warps spend their time, by SASS region.

Reads the source page device_lib.sh's ncu_full writes ($O/TAG_sass.csv.xz:
`ncu --page source --print-source sass --csv`) and prints the warp stall
samples summed over consecutive runs of STEP instructions, with the most
executed count in each run and its first instruction, then the TOP single
instructions. Samples count warp time, not wall time: a phase few warps run
(a last block's merge) shows small even when it is long.

  ncu_sass_regions.py FILE.csv[.xz] [--step 150] [--top 12]
"""
import argparse
import csv
import lzma


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--step", type=int, default=150)
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    opener = lzma.open if a.file.endswith(".xz") else open
    with opener(a.file, "rt", encoding="utf-8", errors="replace") as f:
        r = csv.reader(f)
        next(r)  # the kernel's name
        hdr = next(r)
        ia = hdr.index("Warp Stall Sampling (All Samples)")
        ie = hdr.index("Instructions Executed")
        rows = [x for x in r if len(x) > max(ia, ie)]
    samples = [int(x[ia] or 0) for x in rows]
    executed = [int(x[ie] or 0) for x in rows]
    total = sum(samples) or 1
    print(f"{total} samples over {len(rows)} instructions")
    for a0 in range(0, len(rows), a.step):
        s = sum(samples[a0:a0 + a.step])
        if s:
            print(f"{a0:5d}-{a0 + a.step:5d} {s:6d} {100 * s / total:5.1f}%  most executed "
                  f"{max(executed[a0:a0 + a.step]):7d}  {rows[a0][1].strip()[:50]}")
    print("top instructions:")
    for i in sorted(sorted(range(len(rows)), key=lambda i: -samples[i])[:a.top]):
        print(f"{i:5d} {samples[i]:6d} {100 * samples[i] / total:5.1f}%  executed {executed[i]:7d}  "
              f"{rows[i][1].strip()[:60]}")


if __name__ == "__main__":
    main()
