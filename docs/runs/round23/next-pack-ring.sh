#!/usr/bin/env bash
# Prepared for the next device session (not run): the pack for next-callRing.sh, .devpackY/devcarry.tar.xz
# (carry [".devpackY"]): this tree's specd and gpu_check, and builds with docs/runs/round23/next-mmv-ring.patch
# at other ring depths for the paired (decode) matvec: specd.p3 (Q4_K 3 slots, 2 records in flight a
# warp), specd.p6 (6 slots; Q6_K 4, Q5_K 5, Q8_0 3) and specd.p8 (8 slots), gpu_check.p6. The plan follows
# the paired kernel's residency, so each build splits the matrices its own way (results change with the
# split, batch invariance within a build does not: gpu_check compares the kernel with mmv::Emulate under the
# device's plan). Every build also carries round 14's ablation hook (docs/runs/round14/exp-ablate.patch:
# SPECD_ABLATE="attention,rmsnorm,..." skips those ops, for timing only); specd.abl is this tree with it.
exec "$(dirname "$0")/../../../tests/gpu/pack_variants.sh" .devpackY \
  docs/runs/round23/next-mmv-ring.patch,docs/runs/round14/exp-ablate.patch \
  common/backend/cuda/k_matvec.cu,common/backend/cuda/cuda_backend.cc abl \
  p3:SPECD_MMV_PAIRED_RING=7168,SPECD_MMV_PAIRED_STAGES=3 \
  p6:SPECD_MMV_PAIRED_RING=14336,SPECD_MMV_PAIRED_STAGES=6:+gpu_check \
  p8:SPECD_MMV_PAIRED_RING=20480,SPECD_MMV_PAIRED_STAGES=8
