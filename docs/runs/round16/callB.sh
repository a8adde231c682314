#!/usr/bin/env bash
# Round 16 call B: call A's build plus (1) RMSNorm's block-per-group path as round 15 had it (the weight
# read before the wait; call A's build, from next-norm-prefill.patch, read it after the norm: 6.3 -> 13.5 us
# a launch in ncu), (2) the last-block counters of RMSNorm and the attention through LastBlockArrives
# (one acq_rel atomic by thread 0 between block barriers, no __threadfence: MEMBAR.SC.GPU held 15% of the
# attention's stall samples). gpu_check --no-matmul, ncu per-kernel times (decode at 64 f16, 1100 q8_0),
# specd bench against specd.base (round 15's kernels) twice, alternating; Q8_0 KV at 4200; prefill.
set -u
. tests/gpu/device_lib.sh
device_setup
make_pair $M6 & mkpid=$!
stamp "gpu_check --no-matmul"
timeout 150 $C/bin/gpu_check --no-matmul > $O/check_nomatmul.log 2>&1; echo "rc=$?"
grep -E "^FAIL|SUMMARY" $O/check_nomatmul.log | head -20
xz -9 $O/check_nomatmul.log
ncu_step 1 1 64 f16
ncu_step 1 1 1100
wait $mkpid
bench_against 2 specd.base specd
for b in specd.base specd specd.base specd; do
  stamp "$b: KV q8_0 at 4200 (decode, verify 4); prefill 512 and 128"
  timeout 60 $C/bin/$b bench --backend cuda --model $M6/target.gguf --kv-type q8_0 --ctx 4200 --prefill 4096 \
    --batches 1 --verify-k 1,4 --reps 5 2>&1 | grep -E "^prefill|^ +[0-9]" | tr -s ' ' | tr '\n' '|'; echo
  timeout 60 $C/bin/$b bench --backend cuda --model $M6/target.gguf --ctx 1100 --prefill 512 --batches 1 \
    --verify-k 1 --reps 2 2>&1 | grep -E "^prefill" | tr '\n' '|'
  timeout 60 $C/bin/$b bench --backend cuda --model $M6/target.gguf --ctx 600 --prefill 128 --batches 1 \
    --verify-k 1 --reps 2 2>&1 | grep -E "^prefill" | tr '\n' '|'; echo
done
stamp done
