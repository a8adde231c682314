#!/usr/bin/env bash
# Builds .devpackF33 for next-callF.sh: this tree's specd / gpu_check and fo (next-wide-fold.patch: the wide
# matvec's fold part by part) with its gpu_check.
set -euo pipefail
cd "$(dirname "$0")/../../.."
tests/gpu/pack_variants.sh .devpackF33 docs/runs/round33/next-wide-fold.patch common/backend/cuda/k_matvec.cu \
  fo::+gpu_check
