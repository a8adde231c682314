#!/usr/bin/env bash
# Round 35 pack I, .devpackI35/devcarry.tar.xz (carry [".devpackI35"]), for round 32's callI2.sh with
# DEVPACK=.devpackI35/devcarry.tar.xz: .devcarry/bin the services, specd and gpu_check of this tree (the coordinator's
# warm-up); .devcarry/base/bin round 34's tree (6181f74: no warm-up), taken from .devpackI34's
# bin (round 34's pack-i.sh).
set -euo pipefail
cd "$(dirname "$0")/../../.."
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd specd-coordinator specd-draft-worker specd-target-worker gpu_check" \
  tests/gpu/make_carry.sh > /dev/null
t=$(mktemp -d)
tar -xJf .devpackI34/devcarry.tar.xz -C "$t" .devcarry/bin
mkdir -p .devcarry/base
mv "$t/.devcarry/bin" .devcarry/base/bin
rm -rf "$t"
mkdir -p .devpackI35
XZ_OPT=-6 tar -cJf .devpackI35/devcarry.tar.xz .devcarry
du -sh .devpackI35/devcarry.tar.xz
