#!/usr/bin/env bash
# Round 25 call A: round 24's calls D and E each found half a gain (docs/runs/round25/callD, callE):
# the paired matvec at 72 registers with the plan from the smaller residency (r72m) made the decode 3%
# faster and batches 2-3% slower; records requested into L2 ahead (l1) made the six-sequence verify 7%
# faster and the paired decode 14% slower. Against this tree, alternating:
#   specd.w1     L2 ahead in the 5-8- and 9-16-column kernels only (exp-mmv-l2wide.patch),
#   specd.r72m   call D's variant again, specd.r72mw1 both;
#  1. gpu_check.r72mw1 --matmul-only (its plan moves: kernels == mmv::Emulate under it) and --spec;
#  2. bench_against 2 (target at context 64 and 4200, verify 1 / 7 at 64, 1 / 4 / 7 at 4200, the draft)
#     and bench_multi 1 (batch 6 / 8, six sequences' verify 4 at 1024, verify 6 at 4200).
# Pack: bash docs/runs/round25/pack-a.sh, then
#   run(command="bash docs/runs/round25/callA.sh", carry=[".devpackA"])
set -u
export DEVPACK=.devpackA/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
CHECK_TIMEOUT=170 GPU_CHECK=gpu_check.r72mw1 gpu_checks --matmul-only --spec
wait $mkpid
CTX64_VERIFY=1,7 bench_against 2 specd specd.w1 specd.r72m specd.r72mw1
before 480 multi && bench_multi 1 specd specd.w1 specd.r72m specd.r72mw1
stamp done
bundle_out
