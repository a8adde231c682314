#!/usr/bin/env bash
# Prepared for the next device session: the pack for next-callM.sh, .devpackM/devcarry.tar.xz (carry
# [".devpackM"]): this tree's specd and gpu_check, and with docs/runs/round25/next-attn-mtiles.patch (kernel 2
# takes a tile of several 16-row m-tiles a block where a sequence has more rows than one: a verify's K/V
# rows loaded once for all of them, fewer blocks and split fences):
#   specd.m2 + gpu_check.m2  at most two m-tiles a block (two blocks an SM at head_dim 128);
#   specd.m4 + gpu_check.m4  at most four (SPECD_ATTN_MTILES_MAX=4: a 7-token verify's 56 rows in one
#                            block of 16 warps, one an SM, 128 registers; head_dim 256 keeps two).
# (.devpackM is not in a fresh clone's .git/info/exclude: add "/.devpackM/" there.)
exec "$(dirname "$0")/../../../tests/gpu/pack_variants.sh" .devpackM \
  docs/runs/round25/next-attn-mtiles.patch \
  common/backend/cuda/k_attention.cu,common/backend/cuda/cuda_backend.cc,common/backend/cuda/kernels.h \
  m2::+gpu_check \
  m4:SPECD_ATTN_MTILES_MAX=4:+gpu_check
