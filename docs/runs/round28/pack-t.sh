#!/usr/bin/env bash
# Round 28 call T's pack, .devpackT/devcarry.tar.xz (carry [".devpackT"]): this tree's specd, the three
# services and gpu_check; specd.cmp + gpu_check.cmp: next-merge-pred.patch (the merge kernel's loads
# predicated on the row's splits instead of clamped: one load a row at context < 128, not 48).
set -euo pipefail
cd "$(dirname "$0")/../../.."
files=(common/backend/cuda/k_attention.cu)
git diff --quiet -- "${files[@]}" || { echo "pack-t: ${files[*]} have local changes" >&2; exit 2; }
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd specd-coordinator specd-draft-worker specd-target-worker gpu_check" \
  tests/gpu/make_carry.sh > /dev/null
trap 'git checkout -- "${files[@]}"' EXIT
git apply docs/runs/round28/next-merge-pred.patch
ninja -C build-cuda specd gpu_check > /dev/null
cp build-cuda/cli/specd .devcarry/bin/specd.cmp
cp build-cuda/tests/gpu/gpu_check .devcarry/bin/gpu_check.cmp
git checkout -- "${files[@]}"
ninja -C build-cuda specd gpu_check > /dev/null
strip .devcarry/bin/*
mkdir -p .devpackT
XZ_OPT=-9 tar -cJf .devpackT/devcarry.tar.xz .devcarry
du -sh .devpackT/devcarry.tar.xz
