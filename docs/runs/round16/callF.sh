#!/usr/bin/env bash
# Round 16 call F (the final tree: round 16's kernels + the batch-keyed cost cells): gpu_check --spec (the
# device speculation checks: sampler, acceptance, proposals, lossless speculation) and --no-matmul; the
# attention's split length at depth 4200 (decode, verify 4, KV f16; --cuda-attn-split 64 / 96 / 128 / 192);
# ncu --set full of the f16 attention of a decode step at 4096 (where the depth-4096 gap is: 1.37x llama.cpp
# against 1.50x at depth 0), its SASS source counters kept for the next round.
set -u
. tests/gpu/device_lib.sh
device_setup
make_pair $M6 & mkpid=$!
gpu_checks --spec --no-matmul
ncu_full attn4k AttnSplitV2Kernel 2 2 1 1 4096 f16
wait $mkpid
for rep in 1; do
  for sp in 128 64 96 192; do
    stamp "attn split $sp (rep $rep): decode and verify 4 at 4200"
    timeout 60 $C/bin/specd bench --backend cuda --model $M6/target.gguf --ctx 4200 --prefill 4096 --batches 1 \
      --verify-k 1,4 --reps 5 --cuda-attn-split $sp 2>&1 | grep -E "^ +[0-9]" | tr -s ' ' | tr '\n' '|'
    echo
  done
done
stamp done
