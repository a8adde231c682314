#!/usr/bin/env bash
# Round 16 call G: the attention's split length, 192 against the default 128 (call F, one run each: 192 was
# 1.8% faster at decode and 6% at verify 4 at 4200, KV f16): gpu_check's model and attention checks at split
# 192 (6 warps a block: the merge tree's odd warp count), then decode / verify 4 at 4200 with KV f16 and
# Q8_0, 128 and 192 alternating, twice.
set -u
. tests/gpu/device_lib.sh
device_setup
make_pair $M6 & mkpid=$!
stamp "gpu_check --attn-split 192 --no-matmul"
timeout 100 $C/bin/gpu_check --attn-split 192 --no-matmul > $O/check_split192.log 2>&1; echo "rc=$?"
grep -E "^FAIL|SUMMARY" $O/check_split192.log | head; xz -9 $O/check_split192.log
wait $mkpid
for rep in 1 2; do
  for sp in 128 192; do
    for kv in f16 q8_0; do
      stamp "split $sp, KV $kv (rep $rep): decode, verify 4 at 4200"
      timeout 40 $C/bin/specd bench --backend cuda --model $M6/target.gguf --kv-type $kv --ctx 4200 --prefill 4096 \
        --batches 1 --verify-k 1,4 --reps 5 --cuda-attn-split $sp 2>&1 | grep -E "^ +[0-9]" | tr -s ' ' | tr '\n' '|'
      echo
    done
  done
done
stamp done
