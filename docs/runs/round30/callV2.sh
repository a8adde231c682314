#!/usr/bin/env bash
# Round 30 call V2: exp-wide-bload.patch (specd.wd: round 29's next-mmv-bload.patch kept to the wide
# kernel, the 17-32-column pass: B fragments read whole from its shared-memory stage without zero fill,
# activations staged a column tile at a time) against the tree (specd) and next-mmv-bload.patch whole
# (specd.bl, also the 5-16-column kernels). Carry [".devpackV2"].
#   run(command="bash docs/runs/round30/callV2.sh", carry=[".devpackV2"])
set -u
export DEVPACK=.devpackV2/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" > /dev/null 2>&1
GPU_CHECK=gpu_check.wd gpu_checks --no-matmul
for rep in 1 2 3; do
  for b in specd specd.wd specd.bl; do
    stamp "$b (rep $rep): batch 6, 8 decode and six sequences' verify 4 at 1024"
    BENCH_TIMEOUT=40 bench_row "$b" --ctx 1024 --prefill 64 --batches 6,8 --verify-k 4 --verify-seqs 6
  done
done
CTX64_VERIFY=1,7 bench_against 2 specd specd.wd specd.bl
stamp "gpu_check.wd --matmul-only --quick (to the call's 330th s)"
timeout $(( 330 - ($(date +%s) - t0) )) "$C/bin/gpu_check.wd" --matmul-only --quick > "$O/check_wd_matmul.log" 2>&1
echo "rc=$? ($(grep -c '^PASS' "$O/check_wd_matmul.log") passed)"
grep -E "^FAIL|SUMMARY" "$O/check_wd_matmul.log" | head -20
xz -9 "$O/check_wd_matmul.log"
stamp done
bundle_out
