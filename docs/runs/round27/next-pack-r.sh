#!/usr/bin/env bash
# Prepared for the next device session: the pack for next-callR.sh, .devpackR/devcarry.tar.xz (carry
# [".devpackR"]; add "/.devpackR/" to .git/info/exclude in a fresh clone): this tree's specd and gpu_check,
#   specd.mg + gpu_check.mg   next-attn-merge.patch: the last split block's merge loads unconditionally
#                             (clamped split, weight 0), so its loads overlap;
#   gpu_check.tr / .trmg      next-attn-trace.patch (the round 27 trace on this tree), without / with the merge;
#   specd.qi + gpu_check.qi   next-quant-ilp.patch: the warp quantizer's eight unit sums butterfly by butterfly
#                             across the units (the attention's output quantization, ~4 us a layer in the trace).
set -euo pipefail
cd "$(dirname "$0")/../../.."
files=(common/backend/cuda/k_attention.cu common/backend/cuda/kernels.h common/backend/cuda/k_common.cuh tests/gpu/gpu_check.cc)
git diff --quiet -- "${files[@]}" || { echo "next-pack-r: ${files[*]} have local changes" >&2; exit 2; }
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd gpu_check" tests/gpu/make_carry.sh > /dev/null
trap 'git checkout -- "${files[@]}"' EXIT
d=docs/runs/round27
build() {  # TAG PATCH... : specd.TAG and gpu_check.TAG (or gpu_check.TAG only when TAG starts with tr)
  local tag=$1
  shift
  git checkout -- "${files[@]}"
  for p in "$@"; do git apply "$p"; done
  ninja -C build-cuda specd gpu_check > /dev/null
  case $tag in tr*) ;; *) cp build-cuda/cli/specd ".devcarry/bin/specd.$tag" ;; esac
  cp build-cuda/tests/gpu/gpu_check ".devcarry/bin/gpu_check.$tag"
}
build mg $d/next-attn-merge.patch
build tr $d/next-attn-trace.patch
build trmg $d/next-attn-trace.patch $d/next-attn-merge.patch
build qi $d/next-quant-ilp.patch
git checkout -- "${files[@]}"
ninja -C build-cuda specd gpu_check > /dev/null
strip .devcarry/bin/*
mkdir -p .devpackR
XZ_OPT=-9 tar -cJf .devpackR/devcarry.tar.xz .devcarry
du -sh .devpackR/devcarry.tar.xz
