#!/usr/bin/env bash
# Round 31 pack D, .devpackD31/devcarry.tar.xz (carry [".devpackD31"]), on 3d1d11f's k_matvec.cu:
#   specd, gpu_check            this tree (the lean wide kernel, blocks of up to 8 warps, two an SM)
#   specd.w16, gpu_check.w16    exp-wide16.patch: blocks of up to 16 warps (one an SM at 128 registers), so
#                               that a group's staged activations serve 16 tiles (call B: 4-warp blocks, twice
#                               the activation bytes a tile, 25% slower)
set -euo pipefail
cd "$(dirname "$0")/../../.."
tests/gpu/pack_variants.sh .devpackD31 docs/runs/round31/exp-wide16.patch common/backend/cuda/k_matvec.cu \
  w16::+gpu_check
