#!/usr/bin/env bash
# Prepared for the next device session (not run): matvec records requested into L2 ahead of the two-slot
# ring (next-pack-e.sh: specd.l1 / l2 / l4, 1 / 2 / 4 records ahead), against this tree, alternating:
#  1. gpu_check.l2 --matmul-only (the kernels == mmv::Emulate under the device's plan) and --spec;
#  2. bench_against 2 (target at context 64 and 4200, verify 1 / 7 at 64, 1 / 4 / 7 at 4200, the draft)
#     and bench_multi 1 (batch 6 / 8, six sequences' verify 4 at 1024, verify 6 at 4200).
# Pack: bash docs/runs/round24/next-pack-e.sh, then
#   run(command="bash docs/runs/round24/next-callE.sh", carry=[".devpackE"])
set -u
export DEVPACK=.devpackE/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
CHECK_TIMEOUT=170 GPU_CHECK=gpu_check.l2 gpu_checks --matmul-only --spec
wait $mkpid
CTX64_VERIFY=1,7 bench_against 2 specd specd.l1 specd.l2 specd.l4
before 480 multi && bench_multi 1 specd specd.l1 specd.l2 specd.l4
stamp done
bundle_out
