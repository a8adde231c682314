#!/usr/bin/env bash
# Pack for callA.sh, .devpackA/devcarry.tar.xz (carry [".devpackA"]): this tree's specd and gpu_check, and
# builds with docs/runs/round24/exp-mmv-stages.patch at fewer ring slots: specd.p3 / specd.p2 (the paired,
# decode kernel: Q4_K 3 / 2 slots, more warps an SM with 2 / 1 records in flight each; the plan follows its
# residency, gpu_check.p3 checks the kernel == mmv::Emulate under that plan) and specd.c2 (the 5-8-column
# kernel at 2 slots; same plan and arithmetic as this tree).
exec "$(dirname "$0")/../../../tests/gpu/pack_variants.sh" .devpackA \
  docs/runs/round24/exp-mmv-stages.patch common/backend/cuda/k_matvec.cu \
  p3:SPECD_MMV_PAIRED_STAGES=3:+gpu_check \
  p2:SPECD_MMV_PAIRED_STAGES=2 \
  c2:SPECD_MMV_C1_STAGES=2
