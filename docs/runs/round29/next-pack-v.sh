#!/usr/bin/env bash
# Prepared for the next device session: the pack for next-callV.sh, .devpackV/devcarry.tar.xz (carry
# [".devpackV"]; add "/.devpackV/" to .git/info/exclude in a fresh clone): this tree's specd and gpu_check, and
#   specd.bl + gpu_check.bl   next-mmv-bload.patch: the matvec's B fragments (and the k-quants' limb sums) read
#                             for every lane of a column tile, columns past n included (they reach only their own
#                             D columns, never stored), instead of zero-filled under the lanes' predicates (the
#                             paired kernel keeps them); the wide kernel's activation copies a column tile at a
#                             time, without dividing the piece index. ptxas: the 5-8-column kernel's spills gone
#                             (Q4_K 8, Q5_K 20, Q8_0 12, Q5_1 116 bytes -> 0), the 9-16-column kernel at 104-108
#                             registers instead of 128 (Q4_K-Q6_K); round 29's ncu of the wide kernel: 72 CS2R
#                             (the zero fill) and ~125 instructions (the copy loop) of ~1120 per tile and group.
#   specd.b72 + gpu_check.b72 next-mmv-bload.patch + next-mmv5-72b.patch: with the spills gone, the 5-8-column
#                             kernel at 72 registers (Q4_0, Q5_0, Q3_K, Q4_K, Q5_K; none spill there), as many
#                             warps an SM as the paired kernel, so the plan is the paired kernel's own (round
#                             24: decode 3-5% faster with that plan when the 5-8-column kernel spilled at 72).
set -euo pipefail
cd "$(dirname "$0")/../../.."
f=common/backend/cuda/k_matvec.cu
git diff --quiet -- $f || { echo "next-pack-v: $f has local changes" >&2; exit 2; }
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd gpu_check" tests/gpu/make_carry.sh > /dev/null
trap 'git checkout -- $f' EXIT
git apply docs/runs/round29/next-mmv-bload.patch
ninja -C build-cuda specd gpu_check > /dev/null
cp build-cuda/cli/specd .devcarry/bin/specd.bl
cp build-cuda/tests/gpu/gpu_check .devcarry/bin/gpu_check.bl
git apply docs/runs/round29/next-mmv5-72b.patch
ninja -C build-cuda specd gpu_check > /dev/null
cp build-cuda/cli/specd .devcarry/bin/specd.b72
cp build-cuda/tests/gpu/gpu_check .devcarry/bin/gpu_check.b72
git checkout -- $f
ninja -C build-cuda specd gpu_check > /dev/null
strip .devcarry/bin/*
mkdir -p .devpackV
XZ_OPT=-9 tar -cJf .devpackV/devcarry.tar.xz .devcarry
du -sh .devpackV/devcarry.tar.xz
