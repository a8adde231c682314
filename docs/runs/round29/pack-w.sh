#!/usr/bin/env bash
# Pack for call U's wide-matvec experiments: .devpackW/wide.tar.xz (carry [".devpackU", ".devpackW"]), the
# binaries unpacked into .devcarry/bin beside .devpackU's:
#   specd.w3  exp-wide.patch, SPECD_EXP_WIDE 3: the wide kernel also requests the weight record two groups
#             ahead into L2 (the 16-column kernel's lever, round 25: 7% on 30 columns)
#   specd.w4  SPECD_EXP_WIDE 4: one GroupK over the four column tiles (units outer, each unit's codes and
#             scales decoded once) instead of a GroupK per column tile
set -euo pipefail
cd "$(dirname "$0")/../../.."
f=common/backend/cuda/k_matvec.cu
git diff --quiet -- $f || { echo "pack-w: $f has local changes" >&2; exit 2; }
trap 'git checkout -- $f' EXIT
rm -rf .devpackW/bin && mkdir -p .devpackW/bin
for n in 3 4; do
  git checkout -- $f
  git apply docs/runs/round29/exp-wide.patch
  sed -i "s/^#define SPECD_EXP_WIDE 0/#define SPECD_EXP_WIDE $n/" $f
  ninja -C build-cuda specd > /dev/null
  cp build-cuda/cli/specd .devpackW/bin/specd.w$n
done
git checkout -- $f
ninja -C build-cuda specd > /dev/null
strip .devpackW/bin/*
XZ_OPT=-9 tar -cJf .devpackW/wide.tar.xz -C .devpackW bin
rm -rf .devpackW/bin
du -sh .devpackW/wide.tar.xz
