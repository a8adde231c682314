#!/usr/bin/env bash
# Round 21 call E (round 19's call E on round 20's tree, prepared without a device): two row tiles a block
# in the matvecs of 5-8 (r2c1) and 9-16 (r2c2) columns, each activation fragment loaded feeding both tiles'
# MMAs (docs/runs/round19/exp-mmv-rowpair.patch; round 19's ncu had the 16-column kernel waiting on those
# loads 48% of its cycles). Same warp split and sum order as MmvKernel, so every column's bits are
# MmvKernel's: gpu_check --matmul-only with each build compares the kernel with mmv::Emulate bit for bit
# (n = 1..40). ptxas (sm_90, Q4_K): 8-column 97 -> 136 registers, 16-column 128 -> 232, no spills.
# Then batch 6 and 8 decode, verify 6 at 4200 (8 columns) and six sequences' verify 4 at 1024 (16 + 14
# columns) with this tree's specd and both variants, alternating, twice.
#   pack: bash docs/runs/round21/pack.sh     call: run(command="bash docs/runs/round21/callE.sh", carry=[".devpack"])
set -u
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
for v in r2c1 r2c2; do GPU_CHECK=gpu_check.$v gpu_checks --matmul-only; done
wait $mkpid
bench_multi 2 specd specd.r2c1 specd.r2c2
stamp done
