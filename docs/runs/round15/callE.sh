#!/usr/bin/env bash
# Round 15 call E: RMSNorm and SwiGLU quantize each group with 8 warps (QuantizeGroupBlock: a lane per
# element) instead of one warp per group. gpu_check --no-matmul (the new fused-quantization check: the
# producers' activation bytes == the standalone pass; every model; verify == decode), ncu per-kernel times
# (1 x 1 and 6 x 5 at 1100), then specd bench against main (specd.base), alternating, twice.
set -u
# (Run with the loops that tests/gpu/device_lib.sh now holds as gpu_checks, bench_against and ncu_step:
# equivalent commands.)
. tests/gpu/device_lib.sh
device_setup
make_pair $M6 & mkpid=$!
gpu_checks --no-matmul
xz -dc $O/check_no-matmul.log.xz | grep -E "RMSNorm|SwiGLU" | head -4
ncu_step 1 1 1100
ncu_step 6 5 1100
wait $mkpid
bench_against 2 specd.base specd
stamp done
