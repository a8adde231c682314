#!/usr/bin/env bash
# Round 15 call H: RMSNorm as a block of 8 warps per (group, row) on as many SMs, each block summing the
# row's squares itself, the row's last block writing the residual (x + add) and in-place outputs (counters
# per row). specd.base = call F's build (SwiGLU change, main's RMSNorm). gpu_check --no-matmul (fused
# quantization bytes, counters back at zero, every model, verify == decode), ncu per-kernel times (1 x 1
# at 1100), specd bench against specd.base twice, alternating.
set -u
# (Run with the loops that tests/gpu/device_lib.sh now holds as gpu_checks, bench_against and ncu_step:
# equivalent commands.)
. tests/gpu/device_lib.sh
device_setup
make_pair $M6 & mkpid=$!
gpu_checks --no-matmul
ncu_step 1 1 1100
wait $mkpid
bench_against 2 specd.base specd
stamp done
