#!/usr/bin/env bash
# Prepared for the next session: .devpackG31/devcarry.tar.xz (carry [".devpackG31"]; add "/.devpackG31/" to
# .git/info/exclude in a fresh clone), for next-callG.sh. The patch was made on 5184a06's k_matvec.cu and
# applies to cf8a7c2's (later commits that touch the file may need it rebased):
#   specd, gpu_check          this tree
#   specd.al, gpu_check.al    next-wide-align.patch: the wide kernel's stages on a 128-byte line. Its dynamic
#                             shared memory starts 16 bytes in (LastBlockArrives' static flag); ncu of rounds
#                             29 and 31 shows its stage copies at 2x the L2 sectors (32 against 16 a warp's
#                             512 bytes) and 3x the shared wavefronts (12 against 4) of the per-tile kernels'
#                             aligned ones, and the lean prototype (no static shared memory) at the ideal.
set -euo pipefail
cd "$(dirname "$0")/../../.."
tests/gpu/pack_variants.sh .devpackG31 docs/runs/round31/next-wide-align.patch common/backend/cuda/k_matvec.cu \
  al::+gpu_check
