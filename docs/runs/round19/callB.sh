#!/usr/bin/env bash
# Round 19 call B (round 16's call G, never run): the attention split of 192 positions (6 warps a block: the merge
# tree's odd warp count) against the default 128. gpu_check --attn-split 192 --attn-only and --no-matmul, then
# the 27B-class target (6-layer pair) decode / verify 1, 4, 6 at 4200 and 64, KV f16 and Q8_0, 128 and 192
# alternating, twice; six sequences' verify 4 at 1024. Binaries: call A's (--cuda-attn-tiles 1: round 18's
# attention kernel).
#   run(command="DEVPACK=.devpackA/devcarry.tar.xz bash docs/runs/round19/callB.sh", carry=[".devpackA"])
set -u
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
for f in --attn-only --no-matmul; do
  stamp "gpu_check --attn-split 192 $f"
  timeout 150 "$C/bin/gpu_check" --attn-split 192 $f > "$O/check192_${f#--}.log" 2>&1; echo "rc=$?"
  grep -E "^FAIL|SUMMARY" "$O/check192_${f#--}.log" | head; xz -9 "$O/check192_${f#--}.log"
done
wait $mkpid
for rep in 1 2; do
  for sp in 128 192; do
    for kv in f16 q8_0; do
      stamp "split $sp, KV $kv (rep $rep): decode, verify 1 4 6 at 4200; at 64"
      for ctx in 4200 64; do
        pre=4096; [ $ctx = 64 ] && pre=16
        timeout 40 "$C/bin/specd" bench --backend cuda --model "$M6/target.gguf" --kv-type $kv --ctx $ctx --prefill $pre \
          --batches 1 --verify-k 1,4,6 --reps 5 --cuda-attn-split $sp --cuda-attn-tiles 1 2>&1 | grep -E "^ +[0-9]" | tr -s ' ' | tr '\n' '|'
        echo
      done
    done
  done
done
for sp in 128 192; do
  stamp "six sequences, verify 4 at 1024, KV f16, split $sp"
  timeout 60 "$C/bin/specd" bench --backend cuda --model "$M6/target.gguf" --ctx 1024 --prefill 128 --batches 6 \
    --verify-k 4 --verify-seqs 6 --reps 5 --cuda-attn-split $sp --cuda-attn-tiles 1 2>&1 | grep -E "^ +[0-9]" | tr -s ' ' | tr '\n' '|'
  echo
done
stamp done
