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
for rep in 1 2; do
  for b in specd specd.lwc specd.lwp specd.lwp3 specd.lwp4 specd.lwp43; do
    stamp "$b (rep $rep): batch 6, 8 decode and six sequences' verify 2 / 4 (18 / 30 columns) at 1024"
    BENCH_TIMEOUT=40 bench_row "$b" --ctx 1024 --prefill 64 --batches 6,8 --verify-k 2,4 --verify-seqs 6
  done
done
stamp "gpu_check.lwp3 --matmul-only, every packed type (150 s)"
timeout 150 "$C/bin/gpu_check.lwp3" --matmul-only --types Q4_K,Q5_K,Q6_K,Q2_K,Q3_K,Q8_0,Q4_0,Q4_1,Q5_0,Q5_1 \
  > "$O/check_lwp3_matmul.log" 2>&1
echo "rc=$? ($(grep -c '^PASS' "$O/check_lwp3_matmul.log") passed)"; grep -E "^FAIL|SUMMARY" "$O/check_lwp3_matmul.log" | head
GPU_CHECK=gpu_check.lwp3 CHECK_TIMEOUT=40 gpu_checks --no-matmul
stamp "gpu_check.lwp4 --matmul-only Q4_K,Q8_0 (50 s)"
timeout 50 "$C/bin/gpu_check.lwp4" --matmul-only --types Q4_K,Q8_0 > "$O/check_lwp4_matmul.log" 2>&1
echo "rc=$? ($(grep -c '^PASS' "$O/check_lwp4_matmul.log") passed)"; grep -E "^FAIL|SUMMARY" "$O/check_lwp4_matmul.log" | head
stamp done
bundle_out
