#!/usr/bin/env bash
# Round 25's pack for callA.sh, .devpackA/devcarry.tar.xz (carry [".devpackA"]): this tree's specd and
# gpu_check, and builds with round 24's next-pdl-cap.patch (the paired matvec's register cap and
# SPECD_MMV_PLAN_MIN) and exp-mmv-l2wide.patch (the next record requested into L2, 5-16-column kernels):
#   specd.w1     records 1 ahead into L2 in the 5-8- and 9-16-column kernels only;
#   specd.r72m   the paired kernel at 72 registers, the plan from the smaller residency (call D's variant);
#   specd.r72mw1 both (+ gpu_check.r72mw1: its plan moves, the kernels == mmv::Emulate under it).
set -euo pipefail
cd "$(dirname "$0")/../../.."
exec tests/gpu/pack_variants.sh .devpackA \
  docs/runs/round24/next-pdl-cap.patch,docs/runs/round25/exp-mmv-l2wide.patch \
  common/backend/cuda/k_matvec.cu,common/backend/cuda/k_common.cuh \
  w1:SPECD_MMV_L2_AHEAD=1 \
  r72m:SPECD_MMV_PAIRED_MAXNREG=72,SPECD_MMV_PLAN_MIN=1 \
  r72mw1:SPECD_MMV_PAIRED_MAXNREG=72,SPECD_MMV_PLAN_MIN=1,SPECD_MMV_L2_AHEAD=1:+gpu_check
