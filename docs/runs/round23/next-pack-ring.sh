#!/usr/bin/env bash
# Prepared for the next device session (not run): the pack for next-callRing.sh, .devpackY/devcarry.tar.xz
# (carry [".devpackY"]): this tree's specd and gpu_check, and builds with docs/runs/round23/next-mmv-ring.patch
# at other ring depths for the paired (decode) matvec: specd.p3 (Q4_K 3 slots, 2 records in flight a
# warp), specd.p6 (6 slots; Q6_K 4, Q5_K 5, Q8_0 3) and specd.p8 (8 slots), gpu_check.p6. The plan follows
# the paired kernel's residency, so each build splits the matrices its own way (results change with the
# split, batch invariance within a build does not: gpu_check compares the kernel with mmv::Emulate under the
# device's plan). Builds in build-cuda; restores k_matvec.cu.
set -euo pipefail
cd "$(dirname "$0")/../../.."
K=common/backend/cuda/k_matvec.cu
git diff --quiet -- "$K" || { echo "pack: $K has local changes; commit or stash them first" >&2; exit 2; }
trap 'git checkout -- "$K"' EXIT
mkdir -p /tmp/ring
for v in "p3:7168:3" "p6:14336:6" "p8:20480:8"; do
  IFS=: read -r tag ring stages <<< "$v"
  git checkout -- "$K"
  git apply docs/runs/round23/next-mmv-ring.patch
  sed -i "1i #define SPECD_MMV_PAIRED_RING $ring\n#define SPECD_MMV_PAIRED_STAGES $stages" "$K"
  targets=specd
  [ "$tag" = p6 ] && targets="specd gpu_check"
  # shellcheck disable=SC2086
  ninja -C build-cuda $targets > /dev/null
  cp build-cuda/cli/specd "/tmp/ring/specd.$tag"
  [ "$tag" = p6 ] && cp build-cuda/tests/gpu/gpu_check /tmp/ring/gpu_check.p6
done
git checkout -- "$K"
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd gpu_check" tests/gpu/make_carry.sh > /dev/null
cp /tmp/ring/* .devcarry/bin/
strip .devcarry/bin/*
mkdir -p .devpackY
XZ_OPT=-9 tar -cJf .devpackY/devcarry.tar.xz .devcarry
du -sh .devpackY/devcarry.tar.xz
