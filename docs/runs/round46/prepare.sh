#!/usr/bin/env bash
# Builds round 46's pack in a fresh workspace: .devpackU46, the services, specd and the coordinator of this tree
# (CUDA, sm_90), and the two workers with handoff-spin.patch applied as .devcarry/bin/specd-{target,draft}-worker.spin
# (their threads poll --handoff-spin-us before they sleep), for callL.sh. llama.cpp's pack (.peer) and .devpackQ45
# for the side-by-side calls: docs/runs/round45/prepare.sh q peer.
#   bash docs/runs/round46/prepare.sh   (~20 min on 2 cores after deploy/install-deps.sh --test)
# The tree must be clean (the spin workers are built from it patched, restored after).
set -euo pipefail
. "$(dirname "$0")/../../../tests/gpu/pack_env.sh"
git diff --quiet || { echo "prepare: the tree has local changes" >&2; exit 2; }
deploy/install-deps.sh --test > /dev/null
B=build-cuda
BUILD_DIR=$B CARRY_MODELS=0 CARRY_BINS="specd specd-coordinator specd-draft-worker specd-target-worker" \
  tests/gpu/make_carry.sh > /dev/null
restore() {
  git apply -R docs/runs/round46/handoff-spin.patch
  ninja -C $B specd-target-worker specd-draft-worker > /dev/null
}
git apply docs/runs/round46/handoff-spin.patch
trap restore EXIT
ninja -C $B specd-target-worker specd-draft-worker > /dev/null
for w in target draft; do strip -o ".devcarry/bin/specd-$w-worker.spin" "$B/${w}_worker/specd-$w-worker"; done
mkdir -p .devpackU46
XZ_OPT=-9 tar -cJf .devpackU46/devcarry.tar.xz .devcarry
du -sh .devpackU46/devcarry.tar.xz
