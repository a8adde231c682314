#!/usr/bin/env bash
# Prepared for the next device session (not run): the decode's matvec with its 320-tile launches as two
# blocks a tile (next-mmv-halves.patch over next-mmv-wide.patch, SPECD_MMV_HALVES=1) against this tree.
# Round 25's ncu (call N2, H100): the down projection at 2.24 TB/s against gate/up's 2.65, its 320 blocks
# three on 56 SMs and two on 76.
#  1. gpu_check.h --matmul-only (kernel == host emulation bit for bit at n = 1..64: small matrices run as
#     halves too), --spec, --no-matmul;
#  2. ncu_step of the decode at 4200 (KV F16) with gpu_check and gpu_check.h: the paired kernel's time;
#  3. bench_against 2 specd specd.h (decode at 64 and 4200, verify 1 / 4 / 7, batch 8, the draft).
# Pack: bash docs/runs/round26/next-pack-h.sh, then
#   run(command="bash docs/runs/round26/next-callH.sh", carry=[".devpackH"])
set -u
export DEVPACK=.devpackH/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
GPU_CHECK=gpu_check.h gpu_checks --matmul-only --spec --no-matmul
ncu_step 1 1 4200 f16
GPU_CHECK=gpu_check.h ncu_step 1 1 4200 f16
wait $mkpid
bench_against 2 specd specd.h
stamp done
bundle_out
