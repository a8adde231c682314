#!/usr/bin/env bash
# Round 27's first pack, .devpackM/devcarry.tar.xz (carry [".devpackM"]): this tree's specd and gpu_check
# (the landed wide matvec, not yet run on a device as landed) and round 25's attention m-tiles
# (docs/runs/round25/next-attn-mtiles.patch) as specd.m2 + gpu_check.m2 (at most two 16-row m-tiles a
# block) and specd.m4 + gpu_check.m4 (at most four). As pack_variants.sh, except that kernels.h keeps its
# modification time: the patch adds AttnPlan::mtiles and AttnMtilesFor, which only k_attention.cu and
# cuda_backend.cc (both patched, so rebuilt) use, and k_matvec.cu's hour of 2-core compiles is not redone
# three times for a header line it does not read. gpu_check.tr: exp-attn-trace.patch (round 27);
# specd.wc2 / .wc4: exp-wide-ct.patch; specd.s24 / .s160: exp-slab.patch; specd.rt: exp-rope-trigger.patch.
set -euo pipefail
cd "$(dirname "$0")/../../.."
files=(common/backend/cuda/k_attention.cu common/backend/cuda/cuda_backend.cc common/backend/cuda/kernels.h)
git diff --quiet -- "${files[@]}" || { echo "pack-a: ${files[*]} have local changes" >&2; exit 2; }
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd gpu_check" tests/gpu/make_carry.sh > /dev/null
ref=$(mktemp)
touch -r common/backend/cuda/kernels.h "$ref"
restore() { git checkout -- "${files[@]}"; touch -r "$ref" common/backend/cuda/kernels.h; }
trap 'restore; rm -f "$ref"' EXIT
for v in m2: m4:SPECD_ATTN_MTILES_MAX=4; do
  tag=${v%%:*} def=${v#*:}
  restore
  git apply docs/runs/round25/next-attn-mtiles.patch
  [ -n "$def" ] && sed -i "1i #define ${def%%=*} ${def#*=}" common/backend/cuda/k_attention.cu
  touch -r "$ref" common/backend/cuda/kernels.h
  ninja -C build-cuda specd gpu_check > /dev/null
  cp build-cuda/cli/specd ".devcarry/bin/specd.$tag"
  cp build-cuda/tests/gpu/gpu_check ".devcarry/bin/gpu_check.$tag"
done
# gpu_check.tr: this tree with the attention trace experiment (exp-attn-trace.patch, also gpu_check.cc).
restore
git apply docs/runs/round27/exp-attn-trace.patch
ninja -C build-cuda gpu_check > /dev/null
cp build-cuda/tests/gpu/gpu_check .devcarry/bin/gpu_check.tr
git checkout -- tests/gpu/gpu_check.cc
# specd.wc2 / specd.wc4: the wide matvec with 2 or 4 column tiles a GroupK call (exp-wide-ct.patch).
for ct in 2 4; do
  git checkout -- common/backend/cuda/k_matvec.cu
  git apply docs/runs/round27/exp-wide-ct.patch
  sed -i "1i #define SPECD_WIDE_CT $ct" common/backend/cuda/k_matvec.cu
  ninja -C build-cuda specd > /dev/null
  cp build-cuda/cli/specd ".devcarry/bin/specd.wc$ct"
done
git checkout -- common/backend/cuda/k_matvec.cu
# specd.s24 / specd.s160: the prompt path's dequantized-tile slab at 24 or 160 MiB (exp-slab.patch; 64 today).
for mb in 24 160; do
  git checkout -- common/backend/cuda/cuda_backend.cc
  git apply docs/runs/round27/exp-slab.patch
  sed -i "1i #define SPECD_SLAB_MB $mb" common/backend/cuda/cuda_backend.cc
  ninja -C build-cuda specd > /dev/null
  cp build-cuda/cli/specd ".devcarry/bin/specd.s$mb"
done
git checkout -- common/backend/cuda/cuda_backend.cc
# specd.rt: RoPE lets the attention launch before it waits (exp-rope-trigger.patch).
git apply docs/runs/round27/exp-rope-trigger.patch
ninja -C build-cuda specd > /dev/null
cp build-cuda/cli/specd .devcarry/bin/specd.rt
git checkout -- common/backend/cuda/k_misc.cu
strip .devcarry/bin/*
mkdir -p .devpackM
XZ_OPT=-9 tar -cJf .devpackM/devcarry.tar.xz .devcarry
du -sh .devpackM/devcarry.tar.xz
