#!/usr/bin/env bash
# Round 31 pack A, .devpackA31/devcarry.tar.xz (carry [".devpackA31"]):
#   specd, gpu_check            this tree
#   specd.lwn, gpu_check.lwn    round 30's next-wide-onepass-nt.patch (the one-pass wide kernel, column tiles
#                               compile-time; call R30: Q4_K 30 columns 75.4 / 86.4 us)
#   specd.lwc, gpu_check.lwc    next-wide-lean.patch: lwn with the stage copies walking pointers, a thread the
#                               same activation pieces of every column tile (ncu R30: the flat piece loop's
#                               division and 64-bit index arithmetic ~110 of the 1111 warp instructions a
#                               tile and group)
#   proto_f16mma                round 30's prototype
set -euo pipefail
cd "$(dirname "$0")/../../.."
f=common/backend/cuda/k_matvec.cu
git diff --quiet -- $f || { echo "pack-a: $f has local changes" >&2; exit 2; }
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd gpu_check" tests/gpu/make_carry.sh > /dev/null
trap 'git checkout -- $f' EXIT
for v in lwn:round30/next-wide-onepass-nt lwc:round31/next-wide-lean; do
  git apply "docs/runs/${v#*:}.patch"
  ninja -C build-cuda specd gpu_check > /dev/null
  cp build-cuda/cli/specd ".devcarry/bin/specd.${v%%:*}"
  cp build-cuda/tests/gpu/gpu_check ".devcarry/bin/gpu_check.${v%%:*}"
  git checkout -- $f
done
ninja -C build-cuda specd gpu_check > /dev/null
/usr/local/cuda/bin/nvcc -O3 -std=c++17 -arch=sm_90 -o .devcarry/bin/proto_f16mma docs/runs/round30/proto_f16mma.cu
strip .devcarry/bin/*
mkdir -p .devpackA31
XZ_OPT=-9 tar -cJf .devpackA31/devcarry.tar.xz .devcarry
du -sh .devpackA31/devcarry.tar.xz
