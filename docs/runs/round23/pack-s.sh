#!/usr/bin/env bash
# Round 23's pack for call S, .devpackS/devcarry.tar.xz: this tree's specd and, as specd.base, the specd of
# .devpackB (56f6d99: 580f321's kernels, before the register cap). Builds in build-cuda.
set -euo pipefail
cd "$(dirname "$0")/../../.."
rm -rf /tmp/packS && mkdir -p /tmp/packS && tar -C /tmp/packS -xJf .devpackB/devcarry.tar.xz
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd gpu_check" tests/gpu/make_carry.sh > /dev/null
rm .devcarry/bin/gpu_check
cp /tmp/packS/.devcarry/bin/specd .devcarry/bin/specd.base
mkdir -p .devpackS
XZ_OPT=-9 tar -cJf .devpackS/devcarry.tar.xz .devcarry
du -sh .devpackS/devcarry.tar.xz
