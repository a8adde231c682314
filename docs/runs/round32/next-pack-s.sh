#!/usr/bin/env bash
# Round 32, prepared for the next session: pack S (.devpackS32, carry [".devpackS32"]) for next-callS.sh: this
# tree's specd / gpu_check and three builds of exp-qgemm.patch: w8 (8-warp blocks sharing one activation stage),
# hf (offset-free codes expanded by one HFMA2), w8hf (both).
set -euo pipefail
cd "$(dirname "$0")/../../.."
tests/gpu/pack_variants.sh .devpackS32 docs/runs/round32/exp-qgemm.patch common/backend/cuda/k_qgemm.cu \
  w8:SPECD_EXP_QGW=8:+gpu_check hf:SPECD_EXP_QGH=1:+gpu_check w8hf:SPECD_EXP_QGW=8,SPECD_EXP_QGH=1:+gpu_check
