#!/usr/bin/env bash
# Builds .devpackF33 for next-callF.sh: this tree's specd / gpu_check, fo1 and fo4 (next-wide-fold.patch: the
# wide matvec's fold one part / four parts at a time) with their gpu_check.
set -euo pipefail
cd "$(dirname "$0")/../../.."
tests/gpu/pack_variants.sh .devpackF33 docs/runs/round33/next-wide-fold.patch common/backend/cuda/k_matvec.cu \
  fo1:SPECD_WIDE_FOLD=1:+gpu_check fo4:SPECD_WIDE_FOLD=4:+gpu_check
