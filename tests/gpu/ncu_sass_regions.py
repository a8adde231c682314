#!/usr/bin/env python3
"""Where a kernel's warps spend their time, by SASS region and stall reason.

Reads the source page device_lib.sh's ncu_full writes ($O/TAG_sass.csv[.xz]:
`ncu --page source --print-source sass --csv`, one section a profiled launch)
and prints for each launch: its warp stall samples by stall reason, summed
over consecutive runs of STEP instructions (with the most executed count of
each run and its first instruction), and the TOP single instructions.
Samples count warp time, not wall time: a phase few warps run (a last
block's merge) shows small even when it is long.

  ncu_sass_regions.py FILE.csv[.xz] [--step 150] [--top 12] [--reasons 6]
"""
import argparse
import csv
import lzma

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def launches(path):
    """[(kernel name, header, rows)] of the file's sections."""
    opener = lzma.open if path.endswith(".xz") else open
    out = []
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        for row in csv.reader(f):
            if row and row[0] == "Kernel Name":
                out.append([row[1] if len(row) > 1 else "?", None, []])
            elif out and out[-1][1] is None:
                out[-1][1] = row
            elif out and row:
                out[-1][2].append(row)
    return out


def number(v):
    try:
        return int(float(v or 0))
    except ValueError:
        return 0


def report(name, hdr, rows, step, top, nreasons):
    ia, ie = hdr.index(SAMPLES), hdr.index(EXECUTED)
    reasons = [i for i, h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
    rows = [r for r in rows if len(r) == len(hdr)]
    samples = [number(r[ia]) for r in rows]
    executed = [number(r[ie]) for r in rows]
    total = sum(samples) or 1
    print(f"{name[:110]}\n{sum(samples)} samples over {len(rows)} instructions")
    by_reason = sorted(((sum(number(r[i]) for r in rows), hdr[i][6:]) for i in reasons), reverse=True)
    print("stall reasons: " + ", ".join(f"{n} {100 * s / total:.0f}%" for s, n in by_reason[:nreasons] if s))
    for a0 in range(0, len(rows), step):
        s = sum(samples[a0:a0 + step])
        if not s:
            continue
        part = sorted(((sum(number(r[i]) for r in rows[a0:a0 + step]), hdr[i][6:]) for i in reasons), reverse=True)
        main = ", ".join(f"{n} {v}" for v, n in part[:2] if v)
        print(f"{a0:5d}-{a0 + step:5d} {s:6d} {100 * s / total:5.1f}%  most executed "
              f"{max(executed[a0:a0 + step]):7d}  ({main})  {rows[a0][1].strip()[:40]}")
    print("top instructions:")
    for i in sorted(sorted(range(len(rows)), key=lambda i: -samples[i])[:top]):
        print(f"{i:5d} {samples[i]:6d} {100 * samples[i] / total:5.1f}%  executed {executed[i]:7d}  "
              f"{rows[i][1].strip()[:60]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--step", type=int, default=150)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--reasons", type=int, default=6)
    a = ap.parse_args()
    last = None
    for name, hdr, rows in launches(a.file):
        # ncu's source page may list a launch twice: print each once.
        if hdr and SAMPLES in hdr and EXECUTED in hdr and (name, rows) != last:
            report(name, hdr, rows, a.step, a.top, a.reasons)
        last = (name, rows)


if __name__ == "__main__":
    main()
