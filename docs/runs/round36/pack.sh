#!/usr/bin/env bash
# Round 36's pack, .devpackR36/devcarry.tar.xz (carry [".devpackR36"]), for callW.sh and callV.sh: this tree's
# specd, the three services and gpu_check; specd.r96 / .s3 / .r96s3 and gpu_check.r96s3 (round 35's
# exp-mmv5.patch: the 5-8-column matvec at 96 registers / three ring slots); specd.wc (exp-warm-costs.patch:
# the warm-up's step costs kept in the table requests share, in process and in the coordinator, with its test).
set -euo pipefail
cd "$(dirname "$0")/../../.."
wc_files="common/spec/warmup.h common/spec/warmup.cc common/api/local_generator.cc coordinator/frontend.cc tests/unit/spec_loop_test.cc"
PACK_BINS="specd specd-coordinator specd-draft-worker specd-target-worker gpu_check" \
  PACK_EXTRA="git apply docs/runs/round36/exp-warm-costs.patch && ninja -C build-cuda specd > /dev/null &&
    cp build-cuda/cli/specd .devcarry/bin/specd.wc; git checkout -- $wc_files" \
  tests/gpu/pack_variants.sh .devpackR36 docs/runs/round35/exp-mmv5.patch common/backend/cuda/k_matvec.cu \
  r96:SPECD_MMV5_REGS=96 s3:SPECD_MMV5_STAGES=3 r96s3:SPECD_MMV5_REGS=96,SPECD_MMV5_STAGES=3:+gpu_check
