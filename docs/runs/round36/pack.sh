#!/usr/bin/env bash
# Round 36's pack, .devpackR36/devcarry.tar.xz (carry [".devpackR36"]), for callW.sh and callV.sh: this tree's
# specd, the three services and gpu_check; specd.r96 / .s3 / .r96s3 and gpu_check.r96s3 (round 35's
# exp-mmv5.patch: the 5-8-column matvec at 96 registers / three ring slots). (This session's pack also held
# specd.wc, the warm-up's step costs kept for the requests, as a patch; it landed, c6b060a.)
set -euo pipefail
cd "$(dirname "$0")/../../.."
PACK_BINS="specd specd-coordinator specd-draft-worker specd-target-worker gpu_check" \
  tests/gpu/pack_variants.sh .devpackR36 docs/runs/round35/exp-mmv5.patch common/backend/cuda/k_matvec.cu \
  r96:SPECD_MMV5_REGS=96 s3:SPECD_MMV5_STAGES=3 r96s3:SPECD_MMV5_REGS=96,SPECD_MMV5_STAGES=3:+gpu_check
