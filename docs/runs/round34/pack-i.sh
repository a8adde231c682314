#!/usr/bin/env bash
# Round 34 pack I, .devpackI34/devcarry.tar.xz (carry [".devpackI34"]), for round 32's callI2.sh with
# DEVPACK=.devpackI34/devcarry.tar.xz: .devcarry/bin the services, specd and gpu_check of this tree (the wide
# matvec's fold a part at a time); .devcarry/base/bin round 32-33's tree (765ce41), taken from .devpackI32's
# bin (pack-i.sh of round 32). BASE=.devpackX OUT=.devpackY: another base pack's bin, another pack.
set -euo pipefail
cd "$(dirname "$0")/../../.."
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd specd-coordinator specd-draft-worker specd-target-worker gpu_check" \
  tests/gpu/make_carry.sh > /dev/null
t=$(mktemp -d)
tar -xJf "${BASE:-.devpackI32}/devcarry.tar.xz" -C "$t" .devcarry/bin
mkdir -p .devcarry/base
mv "$t/.devcarry/bin" .devcarry/base/bin
rm -rf "$t"
out=${OUT:-.devpackI34}
mkdir -p "$out"
XZ_OPT=-6 tar -cJf "$out/devcarry.tar.xz" .devcarry
du -sh "$out/devcarry.tar.xz"
