#!/usr/bin/env bash
# Round 22's device pack, .devpackA/devcarry.tar.xz (carry [".devpackA"], DEVPACK=.devpackA/devcarry.tar.xz):
# .devcarry/bin = this tree's specd and gpu_check (build-cuda, sm_90, Release);
# specd.base / gpu_check.base = round 21's pack (.devpack/devcarry.tar.xz: c222527, the kernels of 4ea2d97)
# and its libraries; specd.e2 = this tree with the padded rows (kSwz = false: the merge change alone).
# Carried beside .peer/llama-cuda.tar.xz (42 MiB): within 64 MiB together. Idempotent; a few minutes.
set -euo pipefail
cd "$(dirname "$0")/../../.."
K=common/backend/cuda/k_attention.cu
git diff --quiet -- "$K" || { echo "pack: $K has local changes; commit or stash them first" >&2; exit 2; }
trap 'git checkout -- "$K"' EXIT
sed -i 's/  static constexpr bool kSwz = HD >= 64;/  static constexpr bool kSwz = false;/' "$K"
ninja -C build-cuda specd
cp build-cuda/cli/specd /tmp/specd.e2
git checkout -- "$K"
ninja -C build-cuda specd gpu_check
st=$(mktemp -d)
trap 'rm -rf "$st"; git checkout -- "$K"' EXIT
tar -C "$st" -xJf .devpack/devcarry.tar.xz
rm -rf .devcarry
mkdir -p .devcarry/bin
cp -r "$st/.devcarry/lib" .devcarry/
cp "$st/.devcarry/bin/specd" .devcarry/bin/specd.base
cp "$st/.devcarry/bin/gpu_check" .devcarry/bin/gpu_check.base
cp build-cuda/cli/specd build-cuda/tests/gpu/gpu_check /tmp/specd.e2 .devcarry/bin/
strip .devcarry/bin/specd .devcarry/bin/gpu_check .devcarry/bin/specd.e2
mkdir -p .devpackA
XZ_OPT=-9 tar -cJf .devpackA/devcarry.tar.xz .devcarry
du -sh .devpackA/devcarry.tar.xz
