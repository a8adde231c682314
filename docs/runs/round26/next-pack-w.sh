#!/usr/bin/env bash
# Prepared for the next device session: the pack for next-callW.sh, .devpackW/devcarry.tar.xz (carry
# [".devpackW"]): this tree's specd and gpu_check, and with docs/runs/round26/next-mmv-wide.patch (the wide
# matvec: 17-64 columns a launch, a block's warps consecutive tiles sharing each group's activation records
# staged once in shared memory; the plan's parts across blocks, folded in part order by the last to arrive):
#   specd.w + gpu_check.w    the wide kernel from 17 columns (a 30-column verify in one pass, not two of 16)
#   specd.w9 + gpu_check.w9  ... from 9 columns (it replaces the 16-column kernel)
#   specd.w5                 ... from 5 columns (it replaces the 5-8-column kernel too: batches of 6-8, the
#                            six streams' draft steps)
#   specd.w4                 four warps (tiles) a wide block, not the fewest waves of 8 / 4 / 2
#   specd.s3                 three pipeline stages (two groups in flight, not one)
#   specd.p128, specd.p512   prompts of up to 128 / 512 tokens through wide passes of 64 columns instead
#                            of dequantized F16 tiles + cuBLAS
# (.devpackW is not in a fresh clone's .git/info/exclude: add "/.devpackW/" there.)
exec "$(dirname "$0")/../../../tests/gpu/pack_variants.sh" .devpackW \
  docs/runs/round26/next-mmv-wide.patch \
  common/backend/cuda/kernels.h,common/backend/cuda/k_matvec.cu,common/backend/cuda/cuda_backend.cc,tests/gpu/gpu_check.cc \
  w::+gpu_check \
  w9:SPECD_MMV_WIDE_MIN=9:+gpu_check \
  w5:SPECD_MMV_WIDE_MIN=5 \
  w4:SPECD_MMV_WIDE_WARPS=4 \
  s3:SPECD_MMV_WIDE_STAGES=3 \
  p128:SPECD_MMV_MAX_N=128 \
  p512:SPECD_MMV_MAX_N=512
