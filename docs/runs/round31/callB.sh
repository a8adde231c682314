#!/usr/bin/env bash
# Round 31 call B: the packed activation stage (lwp) with 2 / 3 stages and 8 / 4-warp blocks against the tree
# and call A's lwc.   run(command="bash docs/runs/round31/callB.sh", carry=[".devpackB31"])   (pack-b.sh)
#  1. gpu_check --bench-matvec (Q4_K lines) of every build;
#  2. the six sequences' verify of 18 / 30 columns and batches 6 / 8, alternating, two runs;
#  3. gpu_check.lwp3 --matmul-only over every packed type (bit for bit), --no-matmul; gpu_check.lwp4 Q4_K/Q8_0.
set -u
export DEVPACK=.devpackB31/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M6" > /dev/null 2>&1 & mk=$!
for b in gpu_check gpu_check.lwc gpu_check.lwp gpu_check.lwp3 gpu_check.lwp4 gpu_check.lwp43; do
  stamp "$b --bench-matvec (Q4_K)"
  timeout 30 "$C/bin/$b" --bench-matvec 2>&1 | grep -E "Q4_K (25600|5120x)"
done
wait $mk
bench_verify6 2 specd specd.lwc specd.lwp specd.lwp3 specd.lwp4 specd.lwp43
GPU_CHECK=gpu_check.lwp3 CHECK_TIMEOUT=150 CHECK_TYPES=Q4_K,Q5_K,Q6_K,Q2_K,Q3_K,Q8_0,Q4_0,Q4_1,Q5_0,Q5_1 gpu_checks --matmul-only
GPU_CHECK=gpu_check.lwp3 CHECK_TIMEOUT=40 gpu_checks --no-matmul
GPU_CHECK=gpu_check.lwp4 CHECK_TIMEOUT=50 CHECK_TYPES=Q4_K,Q8_0 gpu_checks --matmul-only
stamp done
bundle_out
