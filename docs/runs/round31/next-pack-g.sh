#!/usr/bin/env bash
# Prepared for the next session: .devpackG31/devcarry.tar.xz (carry [".devpackG31"]; add "/.devpackG31/" to
# .git/info/exclude in a fresh clone), for next-callG.sh. Apply on the commit the patch was made on (5184a06's
# k_matvec.cu; later commits that touch it need the patch rebased):
#   specd, gpu_check          this tree
#   specd.al, gpu_check.al    next-wide-align.patch: the wide kernel's stages on a 128-byte line. Its dynamic
#                             shared memory starts 16 bytes in (LastBlockArrives' static flag); ncu of rounds
#                             29 and 31 shows its stage copies at 2x the L2 sectors (32 against 16 a warp's
#                             512 bytes) and 3x the shared wavefronts (12 against 4) of the per-tile kernels'
#                             aligned ones, and the lean prototype (no static shared memory) at the ideal.
#   proto_f16mma              round 30's prototype (for the ncu beside it)
set -euo pipefail
cd "$(dirname "$0")/../../.."
f=common/backend/cuda/k_matvec.cu
git diff --quiet -- $f || { echo "next-pack-g: $f has local changes" >&2; exit 2; }
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd gpu_check" tests/gpu/make_carry.sh > /dev/null
trap 'git checkout -- $f' EXIT
git apply docs/runs/round31/next-wide-align.patch
ninja -C build-cuda specd gpu_check > /dev/null
cp build-cuda/cli/specd .devcarry/bin/specd.al
cp build-cuda/tests/gpu/gpu_check .devcarry/bin/gpu_check.al
git checkout -- $f
ninja -C build-cuda specd gpu_check > /dev/null
/usr/local/cuda/bin/nvcc -O3 -std=c++17 -arch=sm_90 -o .devcarry/bin/proto_f16mma docs/runs/round30/proto_f16mma.cu
strip .devcarry/bin/*
mkdir -p .devpackG31
XZ_OPT=-6 tar -cJf .devpackG31/devcarry.tar.xz .devcarry
du -sh .devpackG31/devcarry.tar.xz
