#!/usr/bin/env bash
# Round 36 calls W and V in one device call (device starts were scarce): callW.sh's warm-up A/B in process
# (SIX=0), then callV.sh's bench of the 5-8-column matvec variants, then (time allowing) six streams through
# the services with the coordinator's warm-up off / on (adaptive). gpu_check of a variant that wins runs with
# the side-by-side table (callP.sh) once it is in the tree.
#   pack: bash docs/runs/round36/pack.sh
#   run(command="bash docs/runs/round36/callWV.sh", carry=[".devpackR36"])   (~7 min)
set -u
export DEVPACK=${DEVPACK:-.devpackR36/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
OUT=$O/w SIX=0 bash docs/runs/round36/callW.sh 2>&1 | grep -vE "^NVIDIA"
export DEVPACK=  # unpacked once
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M6"
CTX64_VERIFY=1,3,4,6 DEPTH_VERIFY=1,3,4,6,7 bench_against "${BENCH_REPS:-2}" specd specd.r96 specd.s3 specd.r96s3
if before "${SIX_BEFORE:-400}" "six streams"; then
  SETS="nowarm new" MODES="adaptive" REPS=1 OUT=$O/six bash docs/runs/round17/callCohort.sh 2>&1 | grep -vE "^NVIDIA"
fi
stamp done
bundle_out
