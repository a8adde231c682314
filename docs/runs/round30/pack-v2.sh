#!/usr/bin/env bash
# Builds .devpackV2/devcarry.tar.xz for callV2.sh / callF.sh (add "/.devpackV2/" to .git/info/exclude): round 29's
# .devpackV (next-pack-v.sh) without its b72 builds, with specd.wd + gpu_check.wd (exp-wide-bload.patch) added.
set -euo pipefail
cd "$(dirname "$0")/../../.."
f=common/backend/cuda/k_matvec.cu
git diff --quiet -- $f || { echo "pack-v2: $f has local changes" >&2; exit 2; }
[ -f .devpackV/devcarry.tar.xz ] || bash docs/runs/round29/next-pack-v.sh
rm -rf /tmp/pv && mkdir /tmp/pv && tar -xJf .devpackV/devcarry.tar.xz -C /tmp/pv
trap 'git checkout -- $f' EXIT
git apply docs/runs/round30/exp-wide-bload.patch
ninja -C build-cuda specd gpu_check > /dev/null
cp build-cuda/cli/specd /tmp/pv/.devcarry/bin/specd.wd
cp build-cuda/tests/gpu/gpu_check /tmp/pv/.devcarry/bin/gpu_check.wd
rm /tmp/pv/.devcarry/bin/{specd.b72,gpu_check.b72,gpu_check.bl}
strip /tmp/pv/.devcarry/bin/*.wd
git checkout -- $f
ninja -C build-cuda specd gpu_check > /dev/null
mkdir -p .devpackV2
(cd /tmp/pv && XZ_OPT=-9 tar -cJf "$OLDPWD/.devpackV2/devcarry.tar.xz" .devcarry)
du -sh .devpackV2/devcarry.tar.xz
