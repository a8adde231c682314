#!/usr/bin/env bash
# Prepared for the next device session: the pack for next-callU.sh, .devpackU/devcarry.tar.xz (carry
# [".devpackU"]; add "/.devpackU/" to .git/info/exclude in a fresh clone): this tree's specd and gpu_check,
#   specd.pe + gpu_check.pe   next-attn-pos-early.patch: the split kernel reads its rows' positions (batch
#                             metadata) before griddepcontrol.wait, not after Q's loads;
#   specd.al1 / specd.al2     next-attn-late.patch with SPECD_EXP_LATE 1 / 2: the split kernel lets the merge
#                             kernel launch after Q's loads / before its partials, not at its wait;
#   specd.ms + gpu_check.ms   next-merge-short.patch: the merge kernel requests 8 entries for a row of <= 8
#                             splits (a uniform branch), not 48 clamped ones (batch 8 at context 64 was +2%).
set -euo pipefail
cd "$(dirname "$0")/../../.."
files=(common/backend/cuda/k_attention.cu)
git diff --quiet -- "${files[@]}" || { echo "next-pack-u: ${files[*]} have local changes" >&2; exit 2; }
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd gpu_check" tests/gpu/make_carry.sh > /dev/null
trap 'git checkout -- "${files[@]}"' EXIT
d=docs/runs/round28
git apply $d/next-attn-pos-early.patch
ninja -C build-cuda specd gpu_check > /dev/null
cp build-cuda/cli/specd .devcarry/bin/specd.pe
cp build-cuda/tests/gpu/gpu_check .devcarry/bin/gpu_check.pe
git checkout -- "${files[@]}"
git apply $d/next-merge-short.patch
ninja -C build-cuda specd gpu_check > /dev/null
cp build-cuda/cli/specd .devcarry/bin/specd.ms
cp build-cuda/tests/gpu/gpu_check .devcarry/bin/gpu_check.ms
for n in 1 2; do
  git checkout -- "${files[@]}"
  git apply $d/next-attn-late.patch
  sed -i "s/^#define SPECD_EXP_LATE 0/#define SPECD_EXP_LATE $n/" common/backend/cuda/k_attention.cu
  ninja -C build-cuda specd > /dev/null
  cp build-cuda/cli/specd ".devcarry/bin/specd.al$n"
done
git checkout -- "${files[@]}"
ninja -C build-cuda specd gpu_check > /dev/null
strip .devcarry/bin/*
mkdir -p .devpackU
XZ_OPT=-9 tar -cJf .devpackU/devcarry.tar.xz .devcarry
du -sh .devpackU/devcarry.tar.xz
