#!/usr/bin/env bash
# Prepared for the next device session: the pack for next-callD.sh, .devpackR/devcarry.tar.xz (carry
# [".devpackR", ".peer"]): this tree's specd and gpu_check, and
#   specd.pe   (+ gpu_check.pe; next-pdl-cap.patch, SPECD_PDL_EARLY) every kernel lets its dependents be
#              scheduled as it starts waiting (three kernels of the chain in flight instead of two);
#   specd.r72  (next-pdl-cap.patch) the paired (decode) matvec capped at 72 registers (call C's variant);
#   specd.r72m the same with the plan following the smaller of the paired and 5-8-column kernels'
#              residencies (SPECD_MMV_PLAN_MIN);
#   specd.pt   (+ gpu_check.pt; next-mmv-parts.patch) the plan's parts kept, but the 5-8- and 9-16-column
#              kernels give a warp two of them where their own residency would leave a partial second
#              wave (the same sums in the same order: decode == verify holds; ptxas: the paired kernel
#              at 64 registers for Q4_K instead of 76, so the decode's plan changes too).
set -euo pipefail
cd "$(dirname "$0")/../../.."
tests/gpu/pack_variants.sh .devpackR \
  docs/runs/round24/next-pdl-cap.patch common/backend/cuda/k_common.cuh,common/backend/cuda/k_matvec.cu \
  pe:SPECD_PDL_EARLY=1:+gpu_check \
  r72:SPECD_MMV_PAIRED_MAXNREG=72 \
  r72m:SPECD_MMV_PAIRED_MAXNREG=72,SPECD_MMV_PLAN_MIN=1
keep=$(mktemp -d)
cp .devcarry/bin/*.pe .devcarry/bin/*.r72 .devcarry/bin/*.r72m "$keep"/
tests/gpu/pack_variants.sh .devpackR docs/runs/round24/next-mmv-parts.patch common/backend/cuda/k_matvec.cu \
  pt::+gpu_check
cp "$keep"/* .devcarry/bin/
rm -rf "$keep"
XZ_OPT=-9 tar -cJf .devpackR/devcarry.tar.xz .devcarry
du -sh .devpackR/devcarry.tar.xz
