#!/usr/bin/env bash
# Builds .devpackL/devcarry.tar.xz for callL.sh (add "/.devpackL/" to .git/info/exclude): the tree's specd /
# gpu_check from .devpackV2 (pack-v2.sh), specd.lw + gpu_check.lw (exp-wide-onepass.patch), specd.lw9 (the same
# with MmvWide(n) = n > 8).
set -euo pipefail
cd "$(dirname "$0")/../../.."
f=common/backend/cuda/k_matvec.cu
git diff --quiet -- $f || { echo "pack-l: $f has local changes" >&2; exit 2; }
[ -f .devpackV2/devcarry.tar.xz ] || bash docs/runs/round30/pack-v2.sh
rm -rf /tmp/pl && mkdir /tmp/pl && tar -xJf .devpackV2/devcarry.tar.xz -C /tmp/pl
rm /tmp/pl/.devcarry/bin/{specd.bl,specd.wd,gpu_check.wd}
trap 'git checkout -- $f' EXIT
git apply docs/runs/round30/exp-wide-onepass.patch
ninja -C build-cuda specd gpu_check > /dev/null
cp build-cuda/cli/specd /tmp/pl/.devcarry/bin/specd.lw
cp build-cuda/tests/gpu/gpu_check /tmp/pl/.devcarry/bin/gpu_check.lw
sed -i 's/^bool MmvWide(int n) { return n > 16; }/bool MmvWide(int n) { return n > 8; }/' $f
ninja -C build-cuda specd > /dev/null
cp build-cuda/cli/specd /tmp/pl/.devcarry/bin/specd.lw9
git checkout -- $f
ninja -C build-cuda specd gpu_check > /dev/null
strip /tmp/pl/.devcarry/bin/*
mkdir -p .devpackL
(cd /tmp/pl && XZ_OPT=-9 tar -cJf "$OLDPWD/.devpackL/devcarry.tar.xz" .devcarry)
du -sh .devpackL/devcarry.tar.xz
