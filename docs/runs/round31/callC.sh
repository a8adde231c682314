#!/usr/bin/env bash
# Round 31 call C: issue 12's six streams through the three services with the round-31 wide matvec (new)
# against 7bace52's (base), round 17's cohort script, k4 then adaptive; then bench_multi of both specd.
#   run(command="bash docs/runs/round31/callC.sh", carry=[".devpackC31"])   (pack-c.sh builds it)
set -u
export DEVPACK=.devpackC31/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
SETS="base new" MODES="k4 adaptive" REPS=1 OUT=$O bash docs/runs/round17/callCohort.sh 2>&1 | grep -vE "^NVIDIA"
ln -sfn ../base/bin "$C/bin/base"
before 420 "bench_multi" && { make_pair "$M6" > /dev/null 2>&1; bench_multi 1 base/specd specd; }
stamp done
bundle_out
