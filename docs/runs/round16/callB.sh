#!/usr/bin/env bash
# Round 16 call B: call A's build plus (1) RMSNorm's block-per-group path as round 15 had it (the weight
# read before the wait; call A's build, from next-norm-prefill.patch, read it after the norm: 6.3 -> 13.5 us
# a launch in ncu), (2) the last-block counters of RMSNorm and the attention through LastBlockArrives
# (one acq_rel atomic by thread 0 between block barriers, no __threadfence: MEMBAR.SC.GPU held 15% of the
# attention's stall samples). gpu_check --no-matmul, ncu per-kernel times (decode at 64 f16, 1100 q8_0),
# specd bench against specd.base (round 15's kernels) twice, alternating; Q8_0 KV at 4200; prefill.
set -u
# (Run with the loops that tests/gpu/device_lib.sh now holds as gpu_checks and bench_q8_prefill: equivalent
# commands.)
. tests/gpu/device_lib.sh
device_setup
make_pair $M6 & mkpid=$!
gpu_checks --no-matmul
ncu_step 1 1 64 f16
ncu_step 1 1 1100
wait $mkpid
bench_against 2 specd.base specd
bench_q8_prefill specd.base specd specd.base specd
stamp done
