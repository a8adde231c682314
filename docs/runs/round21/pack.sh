#!/usr/bin/env bash
# Round 21's device pack, .devpack/devcarry.tar.xz (carry [".devpack"]): round 20's pack (this tree's
# specd, gpu_check and the three services in .devcarry/bin; 97a7921's services and CLI in .devcarry/base/bin
# and as .devcarry/bin/specd.base) plus round 19's row-pair matvec experiment built on this tree:
# specd.r2c1 / gpu_check.r2c1 (the 5-8-column kernel, two row tiles a block) and specd.r2c2 /
# gpu_check.r2c2 (the 9-16-column kernel), from docs/runs/round19/exp-mmv-rowpair.patch with
# `#define SPECD_MMV_R2 1` / `2` at the top of k_matvec.cu. Builds in build-cuda (sm_90, Release) and, for
# the base, the worktree /tmp/specd-base; idempotent. k_matvec.cu is restored (git checkout) at the end.
set -euo pipefail
cd "$(dirname "$0")/../../.."
B=build-cuda
K=common/backend/cuda/k_matvec.cu
git diff --quiet -- "$K" || { echo "pack: $K has local changes; commit or stash them first" >&2; exit 2; }
mkdir -p /tmp/r21-variants
trap 'git checkout -- "$K"' EXIT
for v in 1 2; do
  git checkout -- "$K"
  git apply docs/runs/round19/exp-mmv-rowpair.patch
  sed -i "1i #define SPECD_MMV_R2 $v" "$K"
  cmake --build "$B" -j"${JOBS:-2}" --target specd gpu_check
  cp "$B/cli/specd" "/tmp/r21-variants/specd.r2c$v"
  cp "$B/tests/gpu/gpu_check" "/tmp/r21-variants/gpu_check.r2c$v"
done
git checkout -- "$K"
bash docs/runs/round20/pack.sh  # rebuilds this tree's binaries, adds the base, writes the tar
for f in /tmp/r21-variants/*; do cp "$f" .devcarry/bin/; strip ".devcarry/bin/$(basename "$f")"; done
XZ_OPT=-6 tar -cJf .devpack/devcarry.tar.xz .devcarry
du -sh .devpack/devcarry.tar.xz
