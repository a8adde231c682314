#!/usr/bin/env bash
# Round 29, call X: the wide matvec in blocks of up to 10 warps at 96 registers (two blocks an SM, 20 warps;
# the block size chosen among every warp count by waves) against the tree before it (85bb7ac's specd from
# .devpackU): gpu_check --matmul-only --quick of the new build (the wide kernel == the host emulation bit for
# bit, every column count bit-identical), the six sequences' verify of 5 tokens at 1024 (bench_multi, two
# runs each), then six streams through the services (round 17's callCohort.sh, k = 4 and adaptive, the new
# binaries).
#   pack: BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd gpu_check specd-coordinator specd-draft-worker
#         specd-target-worker" tests/gpu/make_carry.sh; XZ_OPT=-6 tar -cJf .devpackX/devcarry.tar.xz .devcarry
#   run(command="bash docs/runs/round29/callX.sh", carry=[".devpackX", ".devpackU"])
set -u
export DEVPACK=.devpackX/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
mkdir -p /tmp/pu && tar -xJf .devpackU/devcarry.tar.xz -C /tmp/pu && cp /tmp/pu/.devcarry/bin/specd "$C/bin/specd.base"
(make_pair "$M6"; make_pair "$M8" --residual-gain 0.05) > "$O/make_pairs.txt" 2>&1 & mkpid=$!
stamp "gpu_check --matmul-only --quick"
timeout 200 "$C/bin/gpu_check" --matmul-only --quick > "$O/check_matmul.log" 2>&1
echo "rc=$?"
grep -E "^FAIL|SUMMARY|wide|bit for bit" "$O/check_matmul.log" | grep -E "FAIL|SUMMARY" | head -20
grep -c "^PASS\|^ok" "$O/check_matmul.log"
xz -9 "$O/check_matmul.log"
while [ ! -f "$M6/make-model.seconds" ] && kill -0 $mkpid 2> /dev/null; do sleep 2; done
bench_multi 2 specd.base specd
wait $mkpid
cat "$O/make_pairs.txt"
before 420 cohort && DEVPACK= SETS=new MODES="k4 adaptive" bash docs/runs/round17/callCohort.sh
stamp done
bundle_out
