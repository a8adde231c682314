#!/usr/bin/env bash
# Prepared for the next device session: the pack for next-callM.sh, .devpackM/devcarry.tar.xz (carry
# [".devpackM"]): this tree's specd and gpu_check, and specd.m2 + gpu_check.m2 with
# docs/runs/round25/next-attn-mtiles.patch (kernel 2 takes a tile of two 16-row m-tiles a block where a
# sequence has more rows than one: a verify's K/V rows loaded once for both, half the blocks and fences).
# (.devpackM is not in a fresh clone's .git/info/exclude: add "/.devpackM/" there.)
exec "$(dirname "$0")/../../../tests/gpu/pack_variants.sh" .devpackM \
  docs/runs/round25/next-attn-mtiles.patch \
  common/backend/cuda/k_attention.cu,common/backend/cuda/cuda_backend.cc,common/backend/cuda/kernels.h \
  m2::+gpu_check
