#!/usr/bin/env bash
# Prepared for the next device session (not run): the pack for next-callQ8.sh, .devpackQ/devcarry.tar.xz
# (carry [".devpackQ"]): this tree's specd and gpu_check, and the same with next-q8-v-quants.patch applied
# (specd.q8v, gpu_check.q8v: Q8_0 K/V kept as quants, V's scale folded into the probabilities, three blocks
# an SM at head_dim 128 under a 168-register cap with 36 bytes of spills) and specd.q8v2 (the patch with
# the old launch bounds: two blocks an SM, no cap). Builds in build-cuda; restores k_attention.cu; the
# base binaries and libraries by tests/gpu/make_carry.sh.
set -euo pipefail
cd "$(dirname "$0")/../../.."
K=common/backend/cuda/k_attention.cu
git diff --quiet -- "$K" || { echo "pack: $K has local changes; commit or stash them first" >&2; exit 2; }
trap 'git checkout -- "$K"' EXIT
mkdir -p /tmp/q8v
git apply docs/runs/round22/next-q8-v-quants.patch
ninja -C build-cuda specd gpu_check
cp build-cuda/cli/specd /tmp/q8v/specd.q8v
cp build-cuda/tests/gpu/gpu_check /tmp/q8v/gpu_check.q8v
sed -i 's/__launch_bounds__(kQ8 && HD <= 128 ? 128 : 256, kQ8 && HD <= 128 ? 3 : 1)/__launch_bounds__(256, 1)/' "$K"
sed -i 's/  if (kv_type == GgmlType::Q8_0 \&\& head_dim <= 128 \&\& split_len > 128) return 1;//' "$K"
ninja -C build-cuda specd
cp build-cuda/cli/specd /tmp/q8v/specd.q8v2
git checkout -- "$K"
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd gpu_check" tests/gpu/make_carry.sh > /dev/null
cp /tmp/q8v/specd.q8v /tmp/q8v/gpu_check.q8v /tmp/q8v/specd.q8v2 .devcarry/bin/
strip .devcarry/bin/*
mkdir -p .devpackQ
XZ_OPT=-9 tar -cJf .devpackQ/devcarry.tar.xz .devcarry
du -sh .devpackQ/devcarry.tar.xz
