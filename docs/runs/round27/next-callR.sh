#!/usr/bin/env bash
# Prepared for the next device session (not run). Round 27's trace (call A: the attention's phases by
# globaltimer) found the last split block's merge of the splits 9.5 us of the decode's ~23 us after its wait
# at depth 4200 and ~20 us of the 7-token pass's, the loads guarded by a branch each and so one round trip
# apiece. next-attn-merge.patch loads unconditionally (clamped split, weight 0: the same sums bit for bit).
#  1. gpu_check.mg --attn-only --no-matmul --spec (decode == verify(7) == a 16-token batch bit for bit, both
#     KV types, against the CPU);
#  2. the trace without (gpu_check.tr) and with the merge (gpu_check.trmg): decode at 64 and 4200, the
#     7-token pass at 4200 (KV f16);
#  3. bench_against 2 (verify 1 / 7 at 64, 1 / 4 / 7 at 4200) and bench_multi 1, this tree against specd.mg
#     and specd.qi (next-quant-ilp.patch: the warp quantizer's unit sums interleaved; gpu_check.qi
#     --attn-only --no-matmul first: the same bytes).
# Pack: bash docs/runs/round27/next-pack-r.sh, then
#   run(command="bash docs/runs/round27/next-callR.sh", carry=[".devpackR"])
set -u
export DEVPACK=.devpackR/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
GPU_CHECK=gpu_check.mg gpu_checks --attn-only --no-matmul --spec
GPU_CHECK=gpu_check.qi gpu_checks --attn-only --no-matmul
for b in gpu_check.tr gpu_check.trmg; do
  for st in "1 1 64" "1 1 4200" "1 7 4200"; do
    stamp "$b --profile-step $st f16"
    # shellcheck disable=SC2086
    timeout 60 "$C/bin/$b" --profile-step $st f16 2>&1 | grep ATTN_TRACE
  done
done
wait $mkpid
CTX64_VERIFY=1,7 bench_against 2 specd specd.mg specd.qi
bench_multi 1 specd specd.mg specd.qi
stamp done
bundle_out
