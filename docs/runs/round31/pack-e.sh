#!/usr/bin/env bash
# Round 31 pack E, .devpackE31/devcarry.tar.xz (carry [".devpackE31"]):
#   specd, gpu_check          this tree
#   specd.pp, gpu_check.pp    exp-wide-ppb.patch: a wide block takes several of the plan's parts (its sums
#                             folded in part order: in registers when one block row takes them all, else
#                             through the scratch), WidePartsPerBlock's choice from the waves; for the sweep
#                             SPECD_EXP_PPB=N forces N parts a block (this build only)
set -euo pipefail
cd "$(dirname "$0")/../../.."
f=common/backend/cuda/k_matvec.cu
git diff --quiet -- $f || { echo "pack-e: $f has local changes" >&2; exit 2; }
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd gpu_check" tests/gpu/make_carry.sh > /dev/null
trap 'git checkout -- $f' EXIT
git apply docs/runs/round31/exp-wide-ppb.patch
sed -i 's|^    p.wide_ppb = WidePartsPerBlock(type, tiles, w, p.plan);|&\n    if (const char* e = std::getenv("SPECD_EXP_PPB")) p.wide_ppb = std::clamp(std::atoi(e), 1, static_cast<int>(parts));|' $f
grep -q SPECD_EXP_PPB $f
ninja -C build-cuda specd gpu_check > /dev/null
cp build-cuda/cli/specd .devcarry/bin/specd.pp
cp build-cuda/tests/gpu/gpu_check .devcarry/bin/gpu_check.pp
git checkout -- $f
ninja -C build-cuda specd gpu_check > /dev/null
strip .devcarry/bin/*
mkdir -p .devpackE31
XZ_OPT=-6 tar -cJf .devpackE31/devcarry.tar.xz .devcarry
du -sh .devpackE31/devcarry.tar.xz
