#!/usr/bin/env bash
# Round 32 pack H, .devpackH32/devcarry.tar.xz, built at 616ae2f: .devcarry/base/bin the services, specd and
# gpu_check of that tree (pack-i.sh takes them as its base); .devcarry/bin the same with round 31's
# next-wide-align.patch (its six-stream call was dropped: call Q measured the alignment and it was not kept).
set -euo pipefail
cd "$(dirname "$0")/../../.."
f=common/backend/cuda/k_matvec.cu
git diff --quiet -- $f || { echo "pack-h: $f has local changes" >&2; exit 2; }
bins="specd specd-coordinator specd-draft-worker specd-target-worker gpu_check"
trap 'git checkout HEAD -- $f' EXIT
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="$bins" tests/gpu/make_carry.sh > /dev/null
rm -rf /tmp/specd-base && mv .devcarry /tmp/specd-base
git apply docs/runs/round31/next-wide-align.patch
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="$bins" tests/gpu/make_carry.sh > /dev/null
git checkout HEAD -- $f
mkdir -p .devcarry/base
mv /tmp/specd-base/bin .devcarry/base/bin
rm -rf /tmp/specd-base
mkdir -p .devpackH32
XZ_OPT=-6 tar -cJf .devpackH32/devcarry.tar.xz .devcarry
du -sh .devpackH32/devcarry.tar.xz
