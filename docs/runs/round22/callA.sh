#!/usr/bin/env bash
# Round 22 call A: the attention's F16 blocks in three an SM (rows unpadded, 16-byte chunks XOR-swizzled:
# 72 KiB a block at head_dim 128 instead of 76) and the split merge's partials read as float4 by lanes
# owning 4 consecutive dims, 8 splits ahead. Bit-identical by construction. In one call:
#  1. gpu_check --attn-only (decode == verify == batch, both KV types), then after 2. --no-matmul (--spec
#     at the end);
#  2. specd bench of round 21's specd (specd.base), this one and specd.e2 (the merge change alone),
#     alternating, twice (bench_against: 6-layer pair's target at context 64 and 4200, the draft);
#  3. issue 11's side-by-side table with this tree's specd (tests/gpu/peer_bench.sh; llama.cpp from
#     .peer/llama-cuda.tar.xz: the 0.3.36 sdist built on the CPU machine, tests/gpu/pack_peer.sh);
#  4. ncu per-kernel time of the 7-token pass at 4096 (KV f16), base and this tree; KV Q8_0
#     (bench_q8_prefill) and six sequences (bench_multi), base and this tree; the decode step's ncu.
# Pack: bash docs/runs/round22/pack.sh and tests/gpu/pack_peer.sh /work/peer/lcb, then
#   run(command="bash docs/runs/round22/callA.sh", carry=[".devpackA", ".peer"], kind="nvidia-h200")
set -u
export DEVPACK=.devpackA/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
# The session's device time was short: each later stage runs only if the call is younger than its bound
# (`before`, now in device_lib.sh; this call ran with the same function defined here).
make_pair "$M6" & mkpid=$!
gpu_checks --attn-only
wait $mkpid
bench_against 2 specd.base specd specd.e2
before 330 no-matmul && gpu_checks --no-matmul
if before 360 peer_bench; then
  stamp "peer_bench (this tree's specd)"
  SPECD_BIN=$C/bin/specd SPEC_NS=3 PEER_BUDGET_S=150 OUT=$O/peer timeout 160 bash tests/gpu/peer_bench.sh > /dev/null 2>&1
  echo "rc=$?"
  cat "$O/peer/table.md" 2> /dev/null
fi
before 380 ncu && for v in gpu_check.base gpu_check; do GPU_CHECK=$v ncu_step 1 7 4096 f16; done
before 400 q8 && bench_q8_prefill specd.base specd
before 440 multi && bench_multi 1 specd.base specd
before 470 spec && gpu_checks --spec
before 480 ncu-decode && for v in gpu_check.base gpu_check; do GPU_CHECK=$v ncu_step 1 1 4096 f16; done
stamp done
