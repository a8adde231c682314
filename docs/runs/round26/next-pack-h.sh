#!/usr/bin/env bash
# Prepared for the next device session: the pack for next-callH.sh, .devpackH/devcarry.tar.xz (carry
# [".devpackH"]): this tree's specd and gpu_check, and with next-mmv-wide.patch + next-mmv-halves.patch
# (SPECD_MMV_HALVES=1: the paired (decode) kernel runs each tile as two blocks of half its warps where that
# evens the SMs' load in a one-wave launch: the 27B-class o and down projections, 320 tiles = 320 blocks on
# 132 SMs, 56 running three and 76 two; as 640 blocks, five or four. The second block's part sums meet the
# first's prefix through a scratch, folded in part order by the later block: the same bits):
#   specd.h + gpu_check.h
# (.devpackH is not in a fresh clone's .git/info/exclude: add "/.devpackH/" there.)
exec "$(dirname "$0")/../../../tests/gpu/pack_variants.sh" .devpackH \
  docs/runs/round26/next-mmv-wide.patch,docs/runs/round26/next-mmv-halves.patch \
  common/backend/cuda/kernels.h,common/backend/cuda/k_matvec.cu,common/backend/cuda/cuda_backend.cc,tests/gpu/gpu_check.cc \
  h:SPECD_MMV_HALVES=1:+gpu_check
