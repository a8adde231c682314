#!/usr/bin/env bash
# Builds round 46's pack in a fresh workspace: .devpackU46, the services, specd and the coordinator of this tree
# (CUDA, sm_90), for callL.sh. llama.cpp's pack (.peer) and .devpackQ45 for the side-by-side calls:
# docs/runs/round45/prepare.sh q peer.
#   bash docs/runs/round46/prepare.sh   (~15 min on 2 cores after deploy/install-deps.sh --test)
set -euo pipefail
cd "$(dirname "$0")/../../.."
export PATH=/usr/local/cuda/bin:$PATH
for p in '/.devpack*/' '/.peer/' '/.devcarry/' '/build*/'; do
  grep -qxF "$p" .git/info/exclude 2> /dev/null || echo "$p" >> .git/info/exclude
done
deploy/install-deps.sh --test > /dev/null
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd specd-coordinator specd-draft-worker specd-target-worker" \
  tests/gpu/make_carry.sh > /dev/null
mkdir -p .devpackU46
XZ_OPT=-9 tar -cJf .devpackU46/devcarry.tar.xz .devcarry
du -sh .devpackU46/devcarry.tar.xz
