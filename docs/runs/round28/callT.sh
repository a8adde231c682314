#!/usr/bin/env bash
# Round 28 call T (pack: bash docs/runs/round28/pack-t.sh; run(command="bash docs/runs/round28/callT.sh",
# carry=[".devpackT"])): gpu_check of next-merge-pred.patch; bench_against 2 of the tree (the merge kernel,
# 68ff83d) and specd.cmp; issue 12's six streams through the services with this tree (k = 4, ~80% pair).
set -u
export DEVPACK=.devpackT/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
GPU_CHECK=gpu_check.cmp gpu_checks --attn-only --no-matmul
wait $mkpid
CTX64_VERIFY=1,7 bench_against 1 specd specd.cmp
before 120 six streams && DEVPACK= SETS=new MODES=k4 timeout 100 bash docs/runs/round17/callCohort.sh 2>&1 | grep -v "^NVIDIA"
before 170 "bench rep 2" && CTX64_VERIFY=1,7 bench_against 1 specd.cmp specd
stamp done
bundle_out
