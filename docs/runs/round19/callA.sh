#!/usr/bin/env bash
# Round 19 call A: attention blocks of several m-tiles (16 query rows each), so that a verify's k + 1 tokens
# read (and, Q8_0, convert) their K/V rows once per KV head and split instead of once per 16 rows. Checks:
# gpu_check --attn-only (every attention case at 1 / 2 / 4 m-tiles a block: verify(7) and decode vs the CPU,
# decode == verify(7) == a 16-token batch bit for bit; kernel 1), gpu_check --no-matmul (generated models:
# verify == decode, lossless speculation, at the default m-tiles). Then the 27B-class target (6-layer pair's
# target) at 4200: decode and verify 1, 2, 4, 6, 7 with --cuda-attn-tiles 1 (round 18's kernel) / 2 / 4, KV f16
# and Q8_0, alternating, twice; six sequences' verify of 4 at 1024 (the six-stream step), tiles 1 and default.
# Binaries: .devpackA (specd and gpu_check built with exp-attn-mtiles.patch applied to 09bfc88, CUDA sm_90;
# the patch is not in the tree: more m-tiles a block were slower at every verify length, see PERFORMANCE round 19):
#   run(command="DEVPACK=.devpackA/devcarry.tar.xz bash docs/runs/round19/callA.sh", carry=[".devpackA"])
set -u
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
gpu_checks --attn-only --no-matmul
wait $mkpid
for rep in 1 2; do
  for kv in f16 q8_0; do
    for tiles in 1 2 4; do
      stamp "KV $kv, attention m-tiles $tiles (rep $rep): decode, verify 1 2 4 6 7 at 4200"
      timeout 60 "$C/bin/specd" bench --backend cuda --model "$M6/target.gguf" --kv-type $kv --ctx 4200 \
        --prefill 4096 --batches 1 --verify-k 1,2,4,6,7 --reps 5 --cuda-attn-tiles $tiles > "$O/b.$kv.$tiles.$rep.txt" 2>&1
      grep -E "^ +[0-9]" "$O/b.$kv.$tiles.$rep.txt" | tr -s ' ' | tr '\n' '|'
      echo
    done
  done
done
for tiles in 1 0; do
  stamp "six sequences, verify 4 at 1024, KV f16, attention m-tiles $tiles (0: default)"
  timeout 60 "$C/bin/specd" bench --backend cuda --model "$M6/target.gguf" --ctx 1024 --prefill 128 --batches 1,6 \
    --verify-k 4 --verify-seqs 6 --reps 5 --cuda-attn-tiles $tiles > "$O/b6.$tiles.txt" 2>&1
  grep -E "^ +[0-9]" "$O/b6.$tiles.txt" | tr -s ' ' | tr '\n' '|'
  echo
done
cat "$O"/b*.txt > "$O/bench.log" && xz -9 "$O/bench.log" && rm -f "$O"/b*.txt
stamp done
