#!/usr/bin/env bash
# Round 19 call E (prepared, not run: the session's device time ran out): two row tiles per warp in the matvecs
# of 5-16 columns (exp-mmv-rowpair.patch: a block of two consecutive tiles; each activation fragment loaded
# feeds both tiles' MMAs, half the activation loads per weight byte; call C found the 16-column kernel waiting
# on those loads 48% of its cycles). Same warp split and sum order: every column's bits are MmvKernel's.
# ptxas: Q4_K 8-column 97 -> 136 registers, 16-column 128 -> 232 (no spills). Builds (packed in .devpackY,
# made with `#define SPECD_MMV_R2 1` / `2` at the top of k_matvec.cu with the patch applied to 4291b80):
# specd.r2c1 / gpu_check.r2c1 (8-column kernel only), specd.r2c2 / gpu_check.r2c2 (16-column kernel only),
# against .devpack's round 18 specd. gpu_check --matmul-only with each, then batch 6 and 8 decode, verify 6 at
# 4200 (8 columns) and six sequences' verify 4 at 1024 (16 + 14 columns), alternating, twice.
#   run(command="bash docs/runs/round19/callE.sh", carry=[".devpack", ".devpackY"])
set -u
. tests/gpu/device_lib.sh
device_setup
tar -xJf .devpackY/y.tar.xz
make_pair "$M6" & mkpid=$!
for v in r2c1 r2c2; do GPU_CHECK=gpu_check.$v gpu_checks --matmul-only; done
wait $mkpid
bench_multi 2 specd specd.r2c1 specd.r2c2
stamp done
