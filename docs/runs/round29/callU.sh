#!/usr/bin/env bash
# Round 29, call U: round 28's prepared call (docs/runs/round28/next-callU.sh: gpu_check and benches of the
# split kernel's positions before the wait, the merge kernel's short rows, the split kernel's late trigger)
# and ncu --set full of the wide matvec (17-32 columns) in the six sequences' verify of 5 tokens at 1024:
# where its time goes (issue 12's six streams are bound by it).
#   run(command="bash docs/runs/round29/callU.sh", carry=[".devpackU"])
set -u
export DEVPACK=.devpackU/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
GPU_CHECK=gpu_check.pe gpu_checks --attn-only --no-matmul
GPU_CHECK=gpu_check.ms gpu_checks --attn-only --no-matmul
before 200 ncu && ncu_full wide MmvKernelWide 8 4 6 5 1024 f16
wait $mkpid
CTX64_VERIFY=1,7 bench_against 2 specd specd.pe specd.ms specd.al1 specd.al2
before 480 multi && bench_multi 1 specd specd.pe specd.ms specd.al1 specd.al2
stamp done
bundle_out
