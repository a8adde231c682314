#!/usr/bin/env bash
# Round 32 pack I, .devpackI32/devcarry.tar.xz (carry [".devpackI32"]), for callI2.sh (six streams through the
# services, round 31's binaries against this tree's): .devcarry/bin the services, specd and gpu_check of this
# working tree (ALIGN=1: with round 31's next-wide-align.patch); .devcarry/base/bin round 31's (616ae2f),
# taken from .devpackH32 (pack-h.sh).
set -euo pipefail
cd "$(dirname "$0")/../../.."
f=common/backend/cuda/k_matvec.cu
git diff --quiet -- $f || { echo "pack-i: $f has local changes" >&2; exit 2; }
trap 'git checkout -- $f' EXIT
[ "${ALIGN:-0}" = 1 ] && git apply docs/runs/round31/next-wide-align.patch
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd specd-coordinator specd-draft-worker specd-target-worker gpu_check" \
  tests/gpu/make_carry.sh > /dev/null
t=$(mktemp -d)
tar -xJf .devpackH32/devcarry.tar.xz -C "$t" .devcarry/base
mv "$t/.devcarry/base" .devcarry/base
rm -rf "$t"
mkdir -p .devpackI32
XZ_OPT=-6 tar -cJf .devpackI32/devcarry.tar.xz .devcarry
du -sh .devpackI32/devcarry.tar.xz
