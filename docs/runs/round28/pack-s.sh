#!/usr/bin/env bash
# Round 28 call S's pack, .devpackS/devcarry.tar.xz (carry [".devpackS"]): this tree's specd and gpu_check,
#   specd.oq + gpu_check.oq   next-attn-oq.patch: the attention's outputs also to shared memory (each m-tile's
#                             first warp's merge slot), the output quantizer reads them there, not from global;
#   specd.lN                  exp-late-trigger.patch with SPECD_EXP_LATE = N: where the small kernels let the
#                             next one launch (1: the attention after Q's loads; 2: the attention before its
#                             outputs; 4: RMSNorm after the row's sums; 8: SwiGLU after its loads; 0: at the wait).
set -euo pipefail
cd "$(dirname "$0")/../../.."
files=(common/backend/cuda/k_attention.cu common/backend/cuda/k_misc.cu common/backend/cuda/k_common.cuh)
git diff --quiet -- "${files[@]}" || { echo "pack-s: ${files[*]} have local changes" >&2; exit 2; }
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd gpu_check" tests/gpu/make_carry.sh > /dev/null
trap 'git checkout -- "${files[@]}"' EXIT
d=docs/runs/round28
git apply $d/next-attn-oq.patch
ninja -C build-cuda specd gpu_check > /dev/null
cp build-cuda/cli/specd .devcarry/bin/specd.oq
cp build-cuda/tests/gpu/gpu_check .devcarry/bin/gpu_check.oq
git checkout -- "${files[@]}"
for n in 1 2 4 8 12; do
  git checkout -- "${files[@]}"
  git apply $d/exp-late-trigger.patch
  sed -i "s/^#define SPECD_EXP_LATE 0/#define SPECD_EXP_LATE $n/" common/backend/cuda/k_attention.cu common/backend/cuda/k_misc.cu
  ninja -C build-cuda specd > /dev/null
  cp build-cuda/cli/specd ".devcarry/bin/specd.l$n"
done
git checkout -- "${files[@]}"
ninja -C build-cuda specd gpu_check > /dev/null
strip .devcarry/bin/*
mkdir -p .devpackS
XZ_OPT=-9 tar -cJf .devpackS/devcarry.tar.xz .devcarry
du -sh .devpackS/devcarry.tar.xz
