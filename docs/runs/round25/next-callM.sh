#!/usr/bin/env bash
# Prepared for the next device session (not run): kernel 2 with several 16-row m-tiles a block
# (next-attn-mtiles.patch: specd.m2 / gpu_check.m2 at most two, specd.m4 / gpu_check.m4 at most four)
# against this tree. Round 25's ncu (calls N1, N2): the 7-token pass at 4200 spends 2.30 of its 3.29 ms
# over the decode in the attention (72.5 against 29.9 us a layer: four 16-row m-tiles in 2.7 waves of
# three blocks an SM, each block's life setup chains, merge barriers and the split fence). With M m-tiles
# a block the chunk's K/V rows are loaded once for all, in 1/M of the blocks (M = 2: two an SM at 127
# registers for F16 at head_dim 128; M = 4: one of 16 warps at 127), 1/M of the fences.
#  1. gpu_check.m2 and .m4 --attn-only (decode == verify(7) == a 16-token batch bit for bit, both KV
#     types: the decode runs one m-tile, the others two or four), --no-matmul (every model and KV type
#     against the CPU, verify == decode, prefill == steps, speculation), --spec;
#  2. ncu_step of the 7-token pass at 4200 (KV F16) with each gpu_check: the attention's time per launch;
#  3. bench_against 2 (verify 1 / 7 at 64, 1 / 4 / 7 at 4200) and bench_multi 1 (six sequences' verify 4
#     at 1024: tiles of 4 + 1 tokens with m2, of 5 with m4), this tree against specd.m2 and specd.m4.
# Pack: bash docs/runs/round25/next-pack-m.sh, then
#   run(command="bash docs/runs/round25/next-callM.sh", carry=[".devpackM"])
set -u
export DEVPACK=.devpackM/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
GPU_CHECK=gpu_check.m2 gpu_checks --attn-only --no-matmul --spec
GPU_CHECK=gpu_check.m4 gpu_checks --attn-only --no-matmul --spec
ncu_step 1 7 4200 f16
GPU_CHECK=gpu_check.m2 ncu_step 1 7 4200 f16
GPU_CHECK=gpu_check.m4 ncu_step 1 7 4200 f16
wait $mkpid
CTX64_VERIFY=1,7 bench_against 2 specd specd.m2 specd.m4
before 480 multi && bench_multi 1 specd specd.m2 specd.m4
stamp done
bundle_out
