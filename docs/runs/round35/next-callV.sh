#!/usr/bin/env bash
# Prepared (not run): the 5-8-column matvec's register cap (80) and ring slots (2), tuned on H100s in rounds
# 23-25, tried on the H200 where the 7-token pass is 1.31-1.33x a decode step (issue 11: 1.25x) and a 5-column
# verify at context 64 already 1.19x (the paired kernel's 4 columns ~1.03x): exp-mmv5.patch makes both macros;
# specd.r96 (96 registers), specd.s3 (three slots), specd.r96s3 (both) against the tree's specd, alternating.
# The same arithmetic (registers and slots only), so the same bits; gpu_check.r96s3 checks the k-quants'
# matvecs against mmv::Emulate and the CPU. The plan sizes launches by the smaller residency of the paired and
# the 5-8-column kernels, so the decode rows can move too.
#   pack: tests/gpu/pack_variants.sh .devpackV35 docs/runs/round35/exp-mmv5.patch common/backend/cuda/k_matvec.cu \
#           r96:SPECD_MMV5_REGS=96 s3:SPECD_MMV5_STAGES=3 r96s3:SPECD_MMV5_REGS=96,SPECD_MMV5_STAGES=3:+gpu_check
#   run(command="bash docs/runs/round35/next-callV.sh", carry=[".devpackV35"])   (~5 min)
set -u
export DEVPACK=${DEVPACK:-.devpackV35/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M6"
CTX64_VERIFY=1,3,4,6,7 bench_against 2 specd specd.r96 specd.s3 specd.r96s3
GPU_CHECK=gpu_check.r96s3 CHECK_TYPES=Q4_K,Q5_K,Q6_K,Q8_0 CHECK_TIMEOUT=120 gpu_checks --matmul-only
stamp done
bundle_out
