#!/usr/bin/env python3
"""Per-kernel GPU time from an ncu CSV (`ncu --metrics gpu__time_duration.sum --csv --print-units base`).

  ncu_kernels.py FILE.csv[.xz] [--window REGEX] [--skip REGEX] [--match REGEX] [--top N]

Prints, per kernel name, the total time, the launches and the mean time per launch, largest first.
--window REGEX: only the rows from 40 before the first to 40 after the last kernel matching REGEX
  (e.g. "nvjet|Dequant|ToHalf" for a prefill chunk's GEMM path);
--skip REGEX: leave kernels matching REGEX out (e.g. "Pack" for the weight packing at load);
--match REGEX: only the kernels matching REGEX (e.g. "AttnSplitV2" for one kernel's mean).
"""
import argparse
import collections
import csv
import lzma
import re
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--window")
    ap.add_argument("--skip")
    ap.add_argument("--match")
    ap.add_argument("--top", type=int, default=20)
    a = ap.parse_args()
    opener = lzma.open if a.csv.endswith(".xz") else open
    with opener(a.csv, "rt") as f:
        rows = [r for r in csv.reader(f) if len(r) > 10]
    if not rows:
        sys.exit(f"{a.csv}: no ncu rows")
    head = rows[0]
    ki, vi = head.index("Kernel Name"), head.index("Metric Value")
    body = []
    for r in rows[1:]:
        try:
            body.append((re.sub(r"\(.*", "", r[ki])[:70], float(r[vi].replace(",", ""))))
        except ValueError:
            continue
    lo, hi = 0, len(body)
    if a.window:
        idx = [i for i, (n, _) in enumerate(body) if re.search(a.window, n)]
        if idx:
            lo, hi = max(0, idx[0] - 40), min(len(body), idx[-1] + 40)
        print(f"window: rows {lo}..{hi} of {len(body)}")
    agg = collections.defaultdict(lambda: [0, 0.0])
    for n, v in body[lo:hi]:
        if a.skip and re.search(a.skip, n):
            continue
        if a.match and not re.search(a.match, n):
            continue
        agg[n][0] += 1
        agg[n][1] += v
    total = sum(v for _, v in agg.values())
    print(f"total {total / 1e6:.3f} ms over {sum(c for c, _ in agg.values())} launches")
    for n, (c, v) in sorted(agg.items(), key=lambda x: -x[1][1])[: a.top]:
        print(f"{v / 1e6:9.3f} ms {c:6d} launches {v / 1e3 / c:9.2f} us/launch  {n}")


if __name__ == "__main__":
    main()
