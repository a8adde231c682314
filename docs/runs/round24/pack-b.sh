#!/usr/bin/env bash
# Pack for callB.sh, .devpackB/devcarry.tar.xz (carry [".devpackB", ".peer"]): this tree's specd and
# gpu_check, specd.m2 (docs/runs/round24/exp-mmv-c2-stages.patch: the 16-column kernel at 2 slots too) and
# specd.old, the tree before two-slot rings (call A's specd, from .devpackA: pack-stages.sh).
set -euo pipefail
cd "$(dirname "$0")/../../.."
[ -f .devpackA/devcarry.tar.xz ] || bash docs/runs/round24/pack-stages.sh
old=$(mktemp -d)
tar -C "$old" -xJf .devpackA/devcarry.tar.xz .devcarry/bin/specd
tests/gpu/pack_variants.sh .devpackB docs/runs/round24/exp-mmv-c2-stages.patch common/backend/cuda/k_matvec.cu \
  m2:SPECD_MMV_C2_STAGES=2
cp "$old/.devcarry/bin/specd" .devcarry/bin/specd.old
rm -rf "$old"
XZ_OPT=-9 tar -cJf .devpackB/devcarry.tar.xz .devcarry
du -sh .devpackB/devcarry.tar.xz
