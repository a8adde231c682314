#!/usr/bin/env bash
# Prepared for the next device session: the pack for next-callD.sh, .devpackR/devcarry.tar.xz (carry
# [".devpackR"]): this tree's specd and gpu_check, and builds with docs/runs/round24/next-pdl-cap.patch:
#   specd.pe   (+ gpu_check.pe) every kernel lets its dependents be scheduled as it starts waiting
#              (SPECD_PDL_EARLY: three kernels of the chain in flight instead of two);
#   specd.r72  the paired (decode) matvec capped at 72 registers (call C's variant, again beside pe);
#   specd.r72m the same with the plan following the smaller of the paired and 5-8-column kernels'
#              residencies (SPECD_MMV_PLAN_MIN).
exec "$(dirname "$0")/../../../tests/gpu/pack_variants.sh" .devpackR \
  docs/runs/round24/next-pdl-cap.patch common/backend/cuda/k_common.cuh,common/backend/cuda/k_matvec.cu \
  pe:SPECD_PDL_EARLY=1:+gpu_check \
  r72:SPECD_MMV_PAIRED_MAXNREG=72 \
  r72m:SPECD_MMV_PAIRED_MAXNREG=72,SPECD_MMV_PLAN_MIN=1
