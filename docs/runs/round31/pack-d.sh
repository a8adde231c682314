#!/usr/bin/env bash
# Round 31 pack D, .devpackD31/devcarry.tar.xz (carry [".devpackD31"]):
#   specd, gpu_check            this tree (the lean wide kernel, blocks of up to 8 warps, two an SM)
#   specd.w16, gpu_check.w16    exp-wide16.patch: blocks of up to 16 warps (one an SM at 128 registers), so
#                               that a group's staged activations serve 16 tiles (call B: 4-warp blocks, twice
#                               the activation bytes a tile, 25% slower)
set -euo pipefail
cd "$(dirname "$0")/../../.."
f=common/backend/cuda/k_matvec.cu
git diff --quiet -- $f || { echo "pack-d: $f has local changes" >&2; exit 2; }
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd gpu_check" tests/gpu/make_carry.sh > /dev/null
trap 'git checkout -- $f' EXIT
git apply docs/runs/round31/exp-wide16.patch
ninja -C build-cuda specd gpu_check > /dev/null
cp build-cuda/cli/specd .devcarry/bin/specd.w16
cp build-cuda/tests/gpu/gpu_check .devcarry/bin/gpu_check.w16
git checkout -- $f
ninja -C build-cuda specd gpu_check > /dev/null
strip .devcarry/bin/*
mkdir -p .devpackD31
XZ_OPT=-6 tar -cJf .devpackD31/devcarry.tar.xz .devcarry
du -sh .devpackD31/devcarry.tar.xz
