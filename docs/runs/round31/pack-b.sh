#!/usr/bin/env bash
# Round 31 pack B, .devpackB31/devcarry.tar.xz (carry [".devpackB31"]); every variant on next-wide-packed.patch
# (lwc + the wide kernel's staged activation pieces packed: 4640 bytes a Q4_K column tile instead of 5504, so
# that a third stage, or four 4-warp blocks, fit an SM):
#   specd, gpu_check              this tree (HEAD)
#   specd.lwc, gpu_check.lwc      call A's lean copies
#   specd.lwp, gpu_check.lwp      packed stage, 2 stages, blocks of up to 8 warps
#   specd.lwp3, gpu_check.lwp3    packed stage, 3 stages (Q4_K: 111 KB a block, two blocks an SM)
#   specd.lwp4, gpu_check.lwp4    packed stage, 2 stages, blocks of up to 4 warps (four an SM)
#   specd.lwp43, gpu_check.lwp43  packed stage, 3 stages, blocks of up to 4 warps
set -euo pipefail
cd "$(dirname "$0")/../../.."
f=common/backend/cuda/k_matvec.cu
git diff --quiet -- $f || { echo "pack-b: $f has local changes" >&2; exit 2; }
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd gpu_check" tests/gpu/make_carry.sh > /dev/null
trap 'git checkout -- $f' EXIT
build() {  # name patch [sed expressions]
  local v=$1 p=$2
  shift 2
  git apply "docs/runs/round31/$p.patch"
  for e in "$@"; do sed -i "$e" $f; done
  ninja -C build-cuda specd gpu_check > /dev/null
  cp build-cuda/cli/specd ".devcarry/bin/specd.$v"
  cp build-cuda/tests/gpu/gpu_check ".devcarry/bin/gpu_check.$v"
  git checkout -- $f
}
S3='s/^constexpr int kWideStages = 2;/constexpr int kWideStages = 3;/'
W4='s/^constexpr int kWideMaxWarps = 8;/constexpr int kWideMaxWarps = 4;/'
build lwc next-wide-lean
build lwp next-wide-packed
build lwp3 next-wide-packed "$S3"
build lwp4 next-wide-packed "$W4"
build lwp43 next-wide-packed "$S3" "$W4"
ninja -C build-cuda specd gpu_check > /dev/null
strip .devcarry/bin/*
mkdir -p .devpackB31
XZ_OPT=-9 tar -cJf .devpackB31/devcarry.tar.xz .devcarry
du -sh .devpackB31/devcarry.tar.xz
