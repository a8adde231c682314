#!/usr/bin/env bash
# Round 25's pack for callB.sh, .devpackF/devcarry.tar.xz (carry [".devpackF", ".peer"]): this tree's specd
# and gpu_check, and specd.old, the tree before (call A's specd, from .devpackA: pack-a.sh).
set -euo pipefail
cd "$(dirname "$0")/../../.."
[ -f .devpackA/devcarry.tar.xz ] || bash docs/runs/round25/pack-a.sh
old=$(mktemp -d)
tar -C "$old" -xJf .devpackA/devcarry.tar.xz .devcarry/bin/specd
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd gpu_check" tests/gpu/make_carry.sh > /dev/null
cp "$old/.devcarry/bin/specd" .devcarry/bin/specd.old
rm -rf "$old"
strip .devcarry/bin/*
mkdir -p .devpackF
XZ_OPT=-9 tar -cJf .devpackF/devcarry.tar.xz .devcarry
du -sh .devpackF/devcarry.tar.xz
