#!/usr/bin/env bash
# Prepared for the next device session (not run): next-q8-v-quants.patch on the device. Pack:
# bash docs/runs/round22/next-pack-q8v.sh, then
#   run(command="bash docs/runs/round22/next-callQ8.sh", carry=[".devpackQ"], kind="nvidia-h200")
# 1. gpu_check.q8v --attn-only (decode == verify(7) == a 16-token batch bit for bit, Q8_0 against the CPU),
#    --no-matmul, --spec; 2. specd bench with KV Q8_0 (the services' default) of this tree (specd), the
#    patch at three blocks an SM (specd.q8v) and at two (specd.q8v2), alternating, twice: the target at
#    4200 (decode, verify 1, 4, 7), six sequences at 1024 (batch 6, 8; verify 4 of six), context 64;
#    3. ncu of the Q8_0 7-token pass at 4096, this tree and the patch; ncu --set full of the F16 decode's
#    attention at context 64; everything bundled into out.tar.xz.
# Keep the patch if its checks pass and Q8_0 verifies and batches gain without losing decode.
set -u
export DEVPACK=.devpackQ/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
GPU_CHECK=gpu_check.q8v gpu_checks --attn-only --no-matmul --spec
wait $mkpid
for rep in 1 2; do
  for b in specd specd.q8v specd.q8v2; do
    stamp "$b (rep $rep): KV q8_0 at 4200 (decode, verify 1, 4, 7); six sequences at 1024; context 64"
    for args in "--ctx 4200 --prefill 4096 --batches 1 --verify-k 1,4,7" \
      "--ctx 1024 --prefill 64 --batches 6,8 --verify-k 4 --verify-seqs 6" "--ctx 64 --prefill 16 --batches 1 --verify-k 1,4"; do
      # shellcheck disable=SC2086
      timeout 60 "$C/bin/$b" bench --backend cuda --model "$M6/target.gguf" --kv-type q8_0 $args --reps 5 2>&1 |
        grep -E "^ +[0-9]" | tr -s ' ' | tr '\n' '|'
      echo
    done
  done
done
before 420 ncu && for v in gpu_check gpu_check.q8v; do GPU_CHECK=$v ncu_step 1 7 4096 q8_0; done
# Where the decode's attention spends 13 us at context 64 (F16, one split, 8 blocks): stall reasons by
# SASS line ($O/attn64_sass.csv.xz) and the headline metrics.
before 470 ncu-full && ncu_full attn64 AttnSplitV2 0 2 1 1 64 f16
stamp done
bundle_out
