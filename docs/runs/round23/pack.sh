#!/usr/bin/env bash
# Round 23's device packs (sm_90, Release, build-cuda; idempotent):
#   .devpackB/devcarry.tar.xz  specd and gpu_check of this tree (call B, with .peer)
#   .devpackX/devcarry.tar.xz  specd and the three services of this tree (call C)
set -euo pipefail
cd "$(dirname "$0")/../../.."
for p in B X; do
  bins="specd gpu_check"
  [ $p = X ] && bins="specd specd-coordinator specd-draft-worker specd-target-worker gpu_check"
  # gpu_check in both keeps build-cuda configured with the tests; X leaves it out of its pack
  BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="$bins" tests/gpu/make_carry.sh > /dev/null
  [ $p = X ] && rm .devcarry/bin/gpu_check
  mkdir -p .devpack$p
  XZ_OPT=-9 tar -cJf .devpack$p/devcarry.tar.xz .devcarry
  du -sh .devpack$p/devcarry.tar.xz
done
