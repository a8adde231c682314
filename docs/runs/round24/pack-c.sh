#!/usr/bin/env bash
# Pack for callC.sh, .devpackQ/devcarry.tar.xz (carry [".devpackQ"]): this tree's specd and gpu_check, and
# builds with docs/runs/round24/exp-mmv-maxnreg.patch: specd.r64 / specd.r72 (the paired kernel capped at 64 /
# 72 registers: 32 / 28 warps an SM where 78 kept 25; ptxas: no spills at 72, at 64 none for Q4_K, 8-16 bytes
# for Q5_K / Q8_0, 56-60 for Q6_K) and specd.r72b (the 5-8-column kernel at 72 too: it spills 16-200 bytes).
exec "$(dirname "$0")/../../../tests/gpu/pack_variants.sh" .devpackQ \
  docs/runs/round24/exp-mmv-maxnreg.patch common/backend/cuda/k_matvec.cu \
  r64:SPECD_MMV_PAIRED_MAXNREG=64 \
  r72:SPECD_MMV_PAIRED_MAXNREG=72 \
  r72b:SPECD_MMV_PAIRED_MAXNREG=72,SPECD_MMV_5TO8_MAXNREG=72:+gpu_check
