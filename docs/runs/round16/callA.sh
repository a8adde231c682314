#!/usr/bin/env bash
# Round 16 call A: (1) the attention: Q8_0 rows staged raw by cp.async and converted with half2
# arithmetic (same F16 bits), the rows no kernel of the step writes requested (and Q8_0 converted)
# before griddepcontrol.wait, Q fragments with their row found once; (2) RoPE: the head in registers,
# angles computed before the wait, partners through shared memory, the KV row stored from registers;
# (3) RMSNorm past 64 rows: a block per row (round 15's next-norm-prefill.patch).
# specd.base = round 15's final kernels (call H/I build). gpu_check --no-matmul, ncu per-kernel times
# (decode at 1100, KV q8_0 and f16; f16 at 64), ncu source counters of the f16 attention, specd bench
# against specd.base twice alternating (KV f16, bench's default), Q8_0 KV decode/verify at 4200, prefill.
set -u
# (Run with the loops that tests/gpu/device_lib.sh now holds as gpu_checks, ncu_full and bench_q8_prefill:
# equivalent commands.)
. tests/gpu/device_lib.sh
device_setup
make_pair $M6 & mkpid=$!
gpu_checks --no-matmul
ncu_step 1 1 1100
ncu_step 1 1 1100 f16
ncu_step 1 1 64 f16
ncu_full attn 'AttnSplitV2Kernel|RopeKernel' 4 4 1 1 1100 f16
wait $mkpid
bench_against 2 specd.base specd
bench_q8_prefill specd.base specd specd.base specd
stamp done
