#!/usr/bin/env bash
# Round 23's pack for call R, .devpackR/devcarry.tar.xz (carry [".devpackR"]): this tree's specd and
# gpu_check, and builds with docs/runs/round23/exp-mmv-regcap.patch (the 5-8 and 9-16-column matvec
# kernels as their own __global__ wrappers of one body, under a __maxnreg__ cap):
#   specd.k80 / specd.k88   the 5-8-column kernel at 80 / 88 registers (Q4_K: 97 today, no spills)
#   specd.k2                the 9-16-column kernel at 112 (128 today; Q4_K 8 bytes of spills)
#   specd.k80k2, gpu_check.k80k2   both
# The plan (MmvPlan) sizes each launch's waves by the paired decode kernel's residency (78 registers:
# 25 warps an SM); at 97 registers the 5-8-column kernel keeps 19, so a launch planned as one wave
# may run a partial second one. Builds in build-cuda; restores k_matvec.cu.
set -euo pipefail
cd "$(dirname "$0")/../../.."
K=common/backend/cuda/k_matvec.cu
git diff --quiet -- "$K" || { echo "pack: $K has local changes; commit or stash them first" >&2; exit 2; }
trap 'git checkout -- "$K"' EXIT
mkdir -p /tmp/regcap
for v in "k80:80:" "k88:88:" "k2::112" "k80k2:80:112"; do
  IFS=: read -r tag k1 k2 <<< "$v"
  git checkout -- "$K"
  git apply docs/runs/round23/exp-mmv-regcap.patch
  [ -n "$k1" ] && sed -i "1i #define SPECD_MMV_K1_MAXREG $k1" "$K"
  [ -n "$k2" ] && sed -i "1i #define SPECD_MMV_K2_MAXREG $k2" "$K"
  targets=specd
  [ "$tag" = k80k2 ] && targets="specd gpu_check"
  # shellcheck disable=SC2086
  ninja -C build-cuda $targets > /dev/null
  cp build-cuda/cli/specd "/tmp/regcap/specd.$tag"
  [ "$tag" = k80k2 ] && cp build-cuda/tests/gpu/gpu_check /tmp/regcap/gpu_check.k80k2
done
git checkout -- "$K"
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd gpu_check" tests/gpu/make_carry.sh > /dev/null
cp /tmp/regcap/* .devcarry/bin/
strip .devcarry/bin/*
mkdir -p .devpackR
XZ_OPT=-9 tar -cJf .devpackR/devcarry.tar.xz .devcarry
du -sh .devpackR/devcarry.tar.xz
