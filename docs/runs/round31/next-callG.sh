#!/usr/bin/env bash
# Prepared for the next device session (not run): the wide kernel's stages on a 128-byte line (al,
# next-wide-align.patch) against the tree.
#   run(command="bash docs/runs/round31/next-callG.sh", carry=[".devpackG31"])   (next-pack-g.sh builds it)
#  1. gpu_check --bench-matvec (Q4_K lines), tree / al alternating, twice;
#  2. the six sequences' verify of 18 / 30 columns and batches 6 / 8, alternating, two runs;
#  3. ncu --set full of al's 30-column launch on Q4_K 25600 x 5120: its LDGSTS L2 sectors and shared wavefronts
#     a warp instruction (the tree: 28.9 / 10.9, ideal 14.4 / 3.6, call A);
#  4. gpu_check.al --matmul-only over every packed type (bit for bit), --no-matmul.
# If al wins: land it, then six streams (pack as round31/pack-c.sh, call as round31/callC.sh).
set -u
export DEVPACK=.devpackG31/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M6" > /dev/null 2>&1 & mk=$!
for b in gpu_check gpu_check.al gpu_check gpu_check.al; do
  stamp "$b --bench-matvec (Q4_K)"
  timeout 30 "$C/bin/$b" --bench-matvec 2>&1 | grep -E "Q4_K"
done
wait $mk
bench_verify6 2 specd specd.al
before 300 "ncu" && {
  ncu_full_of al30 MmvKernelWide 216 1 "$C/bin/gpu_check.al" --bench-matvec
  xz -dc "$O/al30_sass.csv.xz" | python3 -c '
import csv, sys
r = csv.reader(sys.stdin); next(r); h = next(r)
c = [h.index(k) for k in ("Instructions Executed", "L2 Theoretical Sectors Global", "L2 Theoretical Sectors Global Ideal",
                           "L1 Wavefronts Shared", "L1 Wavefronts Shared Ideal")]
t = [0.0] * 5
for row in r:
    if "LDGSTS" in row[h.index("Source")]:
        t = [a + float(row[i].replace(",", "") or 0) for a, i in zip(t, c)]
print("LDGSTS a warp instruction: L2 sectors %.1f (ideal %.1f), shared wavefronts %.1f (ideal %.1f)" %
      (t[1] / t[0], t[2] / t[0], t[3] / t[0], t[4] / t[0]))'
}
GPU_CHECK=gpu_check.al CHECK_TIMEOUT=150 CHECK_TYPES=Q4_K,Q5_K,Q6_K,Q2_K,Q3_K,Q8_0,Q4_0,Q4_1,Q5_0,Q5_1 gpu_checks --matmul-only
GPU_CHECK=gpu_check.al CHECK_TIMEOUT=40 gpu_checks --no-matmul
stamp done
bundle_out
