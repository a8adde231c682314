#!/usr/bin/env bash
# Prepared for the next device session: the pack for next-callS.sh, .devpackS/devcarry.tar.xz (carry
# [".devpackS"]): the three services and specd of this tree (.devcarry/base/bin) and of this tree with
# docs/runs/round26/next-mmv-wide.patch (.devcarry/bin), for round 17's cohort call (six streams through
# the services, base against new). Builds in build-dev (services only, no tests); takes the patched
# files back afterwards. WIDE_DEFS: macros for the patched build (e.g. "SPECD_MMV_WIDE_MIN=9"), put at
# the top of kernels.h as next-pack-w.sh does.
# (.devpackS is not in a fresh clone's .git/info/exclude: add "/.devpackS/" there.)
set -euo pipefail
cd "$(dirname "$0")/../../.."
files=(common/backend/cuda/kernels.h common/backend/cuda/k_matvec.cu common/backend/cuda/cuda_backend.cc
       tests/gpu/gpu_check.cc)
git diff --quiet -- "${files[@]}" || { echo "next-pack-s: ${files[*]} have local changes" >&2; exit 2; }
BUILD_DIR=build-dev CARRY_MODELS=0 tests/gpu/make_carry.sh > /dev/null
rm -rf /tmp/specd-base && mv .devcarry /tmp/specd-base
trap 'git checkout -- "${files[@]}"' EXIT
git apply docs/runs/round26/next-mmv-wide.patch
IFS=, read -ra ds <<< "${WIDE_DEFS:-}"
for d in "${ds[@]}"; do sed -i "1i #define ${d%%=*} ${d#*=}" "${files[0]}"; done
BUILD_DIR=build-dev CARRY_MODELS=0 tests/gpu/make_carry.sh > /dev/null
mkdir -p .devcarry/base
mv /tmp/specd-base/bin .devcarry/base/bin
rm -rf /tmp/specd-base
mkdir -p .devpackS
XZ_OPT=-9 tar -cJf .devpackS/devcarry.tar.xz .devcarry
du -sh .devpackS/devcarry.tar.xz
