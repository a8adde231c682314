#!/usr/bin/env bash
# Round 20's device pack, .devpack/devcarry.tar.xz (carry [".devpack"]): .devcarry/bin = this tree's
# specd, gpu_check and the three services; .devcarry/base/bin = the same four services and CLI of 97a7921
# (round 19's tree: draft cells keyed by forwards only, RMSNorm a block per group up to 64 rows), and
# .devcarry/bin/specd.base. Builds (sm_90, Release) in build-cuda and, for the base, a worktree in
# /tmp/specd-base: ~40 min on 2 cores; idempotent (rebuilds only what changed).
set -euo pipefail
cd "$(dirname "$0")/../../.."
BUILD_DIR=build-cuda CARRY_MODELS=0 \
  CARRY_BINS="specd specd-coordinator specd-draft-worker specd-target-worker gpu_check" tests/gpu/make_carry.sh
[ -d /tmp/specd-base ] || git worktree add --detach /tmp/specd-base 97a7921
(cd /tmp/specd-base && CARRY_MODELS=0 tests/gpu/make_carry.sh)
mkdir -p .devcarry/base
rm -rf .devcarry/base/bin
cp -r /tmp/specd-base/.devcarry/bin .devcarry/base/bin
cp .devcarry/base/bin/specd .devcarry/bin/specd.base
mkdir -p .devpack
XZ_OPT=-6 tar -cJf .devpack/devcarry.tar.xz .devcarry
du -sh .devpack/devcarry.tar.xz
