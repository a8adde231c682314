#!/usr/bin/env bash
# Round 31 call A: the lean-copy wide kernel (lwc) against the tree and lwn.
#   run(command="bash docs/runs/round31/callA.sh", carry=[".devpackA31"])   (pack-a.sh builds it)
#  1. gpu_check --bench-matvec (Q4_K lines) of the three builds;
#  2. the six sequences' verify of 18 / 30 columns and batches 6 / 8, alternating, two runs;
#  3. gpu_check.lwc --matmul-only over every packed type (bit for bit against the emulation), --no-matmul;
#  4. ncu --set full of lwc's 30-column launch on Q4_K 25600 x 5120 (216 wide launches before it).
set -u
export DEVPACK=.devpackA31/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M6" > /dev/null 2>&1 & mk=$!
for b in gpu_check gpu_check.lwn gpu_check.lwc; do
  stamp "$b --bench-matvec (Q4_K)"
  timeout 30 "$C/bin/$b" --bench-matvec 2>&1 | grep -E "Q4_K"
done
wait $mk
bench_verify6 2 specd specd.lwn specd.lwc
GPU_CHECK=gpu_check.lwc CHECK_TIMEOUT=150 CHECK_TYPES=Q4_K,Q5_K,Q6_K,Q2_K,Q3_K,Q8_0,Q4_0,Q4_1,Q5_0,Q5_1 gpu_checks --matmul-only
GPU_CHECK=gpu_check.lwc CHECK_TIMEOUT=40 gpu_checks --no-matmul
before 500 "ncu" && ncu_full_of lwc30 MmvKernelWide 216 1 "$C/bin/gpu_check.lwc" --bench-matvec
stamp done
bundle_out
