#!/usr/bin/env bash
# Round 20 call A (prepared in session 20, which had no device time): RMSNorm with as few groups a block as
# keep a launch in one wave (673229c; round 19's ncu: 15.69 us a launch for a six-sequence verify's 30 rows,
# 6.92 for 7 rows, 600 blocks at 2 an SM). gpu_check --no-matmul (RMSNorm at 1 / 3 / 30 / 65 / 300 rows,
# a row == that row alone, bit for bit; decode == verify identities) and --spec; ncu's per-kernel time of
# the six-sequence verify forward (RmsNormKernel us/launch against 15.69); then specd bench of round 19's
# tree (specd.base) and this one, alternating, twice: batch 6 and 8 decode and six sequences' verify 4 at
# 1024, verify 6 at 4200. Pack: bash docs/runs/round20/pack.sh, then
#   run(command="bash docs/runs/round20/callA.sh", carry=[".devpack"])
# Call B, the draft cells per member count and the plain-proposal rule (33ac46a) on six streams:
#   run(command="SETS='base new' MODES='k4 adaptive' bash docs/runs/round17/callCohort.sh", carry=[".devpack"])
# (round 19: adaptive / k = 4 0.948 with round 18's tree, drifting to k = 7-8.)
set -u
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
gpu_checks --no-matmul --spec
ncu_step 6 5 1024 f16
wait $mkpid
bench_multi 2 specd.base specd
stamp done
