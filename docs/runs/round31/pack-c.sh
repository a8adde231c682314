#!/usr/bin/env bash
# Round 31 pack C, .devpackC31/devcarry.tar.xz (carry [".devpackC31"]), for round 17's cohort call (six
# streams through the three services, base against new): .devcarry/bin the services, specd and gpu_check of
# this tree; .devcarry/base/bin the same of 7bace52's matvec (the wide kernel before round 31).
set -euo pipefail
cd "$(dirname "$0")/../../.."
f=common/backend/cuda/k_matvec.cu
git diff --quiet -- $f || { echo "pack-c: $f has local changes" >&2; exit 2; }
bins="specd specd-coordinator specd-draft-worker specd-target-worker gpu_check"
trap 'git checkout HEAD -- $f' EXIT
git checkout 7bace52 -- $f
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="$bins" tests/gpu/make_carry.sh > /dev/null
rm -rf /tmp/specd-base && mv .devcarry /tmp/specd-base
git checkout HEAD -- $f
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="$bins" tests/gpu/make_carry.sh > /dev/null
mkdir -p .devcarry/base
mv /tmp/specd-base/bin .devcarry/base/bin
rm -rf /tmp/specd-base
mkdir -p .devpackC31
XZ_OPT=-6 tar -cJf .devpackC31/devcarry.tar.xz .devcarry
du -sh .devpackC31/devcarry.tar.xz
