#!/usr/bin/env bash
# Round 32 call I: issue 12's six streams through the three services, this tree (new: the quantized prompt
# GEMM, k_qgemm.cu) against round 31's binaries (base, 616ae2f); round 17's cohort script, k4 then adaptive,
# one run each; then the prefill of 128 / 512 tokens with each specd.
#   run(command="bash docs/runs/round32/callI.sh", carry=[".devpackI32"])   (pack-i.sh builds it)
set -u
export DEVPACK=.devpackI32/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
SETS="base new" MODES="k4 adaptive" REPS=1 OUT=$O bash docs/runs/round17/callCohort.sh 2>&1 | grep -vE "^NVIDIA"
ln -sfn ../base/bin "$C/bin/base"
before 420 "prefill" && { make_pair "$M6" > /dev/null 2>&1; bench_q8_prefill base/specd specd; }
stamp done
bundle_out
