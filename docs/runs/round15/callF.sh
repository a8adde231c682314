#!/usr/bin/env bash
# Round 15 call F: the kept change (SwiGLU quantizes each group with 8 warps, QuantizeGroupBlock; RMSNorm
# is main's again after call E): gpu_check --no-matmul, specd bench against main (specd.base) twice,
# alternating, then the side-by-side table with llama.cpp (tests/gpu/peer_bench.sh, same files, same call).
# run(command="bash docs/runs/round15/callF.sh", carry=[".devpack", ".peer"])
set -u
# (Run with the loops that tests/gpu/device_lib.sh now holds as gpu_checks, bench_against and ncu_step:
# equivalent commands.)
. tests/gpu/device_lib.sh
device_setup
make_pair $M6 & mkpid=$!
gpu_checks --no-matmul
wait $mkpid
bench_against 2 specd.base specd
stamp "peer side by side"
SPEC_NS="3 6" PEER_BUDGET_S=300 bash tests/gpu/peer_bench.sh 2>&1 | tail -45
stamp done
