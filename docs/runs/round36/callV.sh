#!/usr/bin/env bash
# Round 36 call V (round 35's prepared call V, never run, with the 7-token pass itself): the 5-8-column
# matvec's register cap (80) and ring slots (2), tuned on H100s in rounds 23-25, tried on the H200
# (exp-mmv5.patch: both as macros; specd.r96 = 96 registers, specd.s3 = three slots, specd.r96s3 = both)
# against the tree, alternating; `specd bench`'s verify k is the drafts, a pass of k + 1 tokens: k = 3 (the
# paired kernel's last), 4 and 6 (the 7-token pass) at context 64 and 4200. The same arithmetic (registers
# and slots only), so the same bits; gpu_check.r96s3 --matmul-only checks the k-quants' matvecs against
# mmv::Emulate and the CPU.
#   pack: bash docs/runs/round36/pack.sh
#   run(command="bash docs/runs/round36/callV.sh", carry=[".devpackR36"])   (~5 min)
set -u
export DEVPACK=${DEVPACK:-.devpackR36/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M6"
CTX64_VERIFY=1,3,4,6 DEPTH_VERIFY=1,3,4,6,7 bench_against 2 specd specd.r96 specd.s3 specd.r96s3
if before 420 "gpu_check.r96s3"; then
  GPU_CHECK=gpu_check.r96s3 CHECK_TYPES=Q4_K,Q5_K,Q6_K,Q8_0 CHECK_TIMEOUT=120 gpu_checks --matmul-only
fi
stamp done
bundle_out
