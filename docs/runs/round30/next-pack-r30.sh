#!/usr/bin/env bash
# Prepared for the next device session: the pack for next-callR30.sh, .devpackR30/devcarry.tar.xz (carry
# [".devpackR30"]; add "/.devpackR30/" to .git/info/exclude in a fresh clone):
#   specd, gpu_check              this tree
#   specd.tn, gpu_check.tn        next-wide-nt.patch: the wide kernel templated on its column tiles (3 for 17-24
#                                 columns, 4 for 25-32), so that no loop over the tiles breaks at a runtime count
#                                 (ptxas: Q4_K 126-127 registers, no spills; Q5_K 8, Q6_K 16 bytes spilled at 4)
#   specd.lwn, gpu_check.lwn      next-wide-onepass-nt.patch: exp-wide-onepass.patch (call L: 12-16% slower with
#                                 the runtime count) with the same templating (Q4_K 12 bytes spilled at 4)
#   specd.lwn4, gpu_check.lwn4    next-wide-onepass-nt4.patch: lwn in blocks of at most 4 warps (the prototype's;
#                                 round 26 had 4-warp blocks 9% slower with the per-tile structure)
#   proto_f16mma                  docs/runs/round30/proto_f16mma.cu (the lean prototype, for ncu beside the product;
#                                 its kI8Limb runs time the exact mins the product takes)
set -euo pipefail
cd "$(dirname "$0")/../../.."
f=common/backend/cuda/k_matvec.cu
git diff --quiet -- $f || { echo "next-pack-r30: $f has local changes" >&2; exit 2; }
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd gpu_check" tests/gpu/make_carry.sh > /dev/null
trap 'git checkout -- $f' EXIT
for v in tn:next-wide-nt lwn:next-wide-onepass-nt lwn4:next-wide-onepass-nt4; do
  git apply "docs/runs/round30/${v#*:}.patch"
  ninja -C build-cuda specd gpu_check > /dev/null
  cp build-cuda/cli/specd ".devcarry/bin/specd.${v%%:*}"
  cp build-cuda/tests/gpu/gpu_check ".devcarry/bin/gpu_check.${v%%:*}"
  git checkout -- $f
done
ninja -C build-cuda specd gpu_check > /dev/null
/usr/local/cuda/bin/nvcc -O3 -std=c++17 -arch=sm_90 -o .devcarry/bin/proto_f16mma docs/runs/round30/proto_f16mma.cu
strip .devcarry/bin/*
mkdir -p .devpackR30
XZ_OPT=-9 tar -cJf .devpackR30/devcarry.tar.xz .devcarry
du -sh .devpackR30/devcarry.tar.xz
