#!/usr/bin/env bash
# Prepared for the next session (not run in round 14): after `git apply
# docs/runs/round14/next-attn-staged-quant.patch`, carry specd + gpu_check (.devcarry/bin, main's specd as
# specd.base), then run(command="bash docs/runs/round14/callG.sh", carry=[".devpack"]):
# gpu_check --no-matmul (bit identity of the attention's quantized output), decode at context 64 and 4200,
# verifies, the draft, against main.
set -u
. tests/gpu/device_lib.sh
device_setup
make_pair $M6 & mkpid=$!
stamp "gpu_check --no-matmul"
timeout 150 $C/bin/gpu_check --no-matmul > $O/check.log 2>&1; echo "check rc=$?"
grep -E "^FAIL|SUMMARY" $O/check.log | head -20
wait $mkpid
T=$M6/target.gguf
for rep in 1 2; do
  for b in specd.base specd; do
    stamp "$b (rep $rep): target ctx 64, ctx 4200 (verify 1,4,7); draft ctx 64"
    timeout 40 $C/bin/$b bench --backend cuda --model $T --ctx 64 --prefill 16 --batches 1 --verify-k 1,4 --reps 5 > $O/$b.ctx64.$rep.txt 2>&1
    sed -n '/^decode/,$p' $O/$b.ctx64.$rep.txt | grep "^ " | tr -s ' ' | tr '\n' '|'; echo
    timeout 60 $C/bin/$b bench --backend cuda --model $T --ctx 4200 --prefill 4096 --batches 1 --verify-k 1,4,7 --reps 5 > $O/$b.depth.$rep.txt 2>&1
    sed -n '/^decode/,$p' $O/$b.depth.$rep.txt | grep "^ " | tr -s ' ' | tr '\n' '|'; echo
    timeout 30 $C/bin/$b bench --backend cuda --model $M6/draft.gguf --ctx 64 --prefill 64 --batches 1 --verify-k 1 --reps 5 > $O/$b.draft.$rep.txt 2>&1
    sed -n '/^decode/,/^$/p' $O/$b.draft.$rep.txt | grep "^ " | tr -s ' ' | tr '\n' '|'; echo
  done
done
cat $O/*.txt > $O/bench.log; xz -9 $O/bench.log; rm -f $O/*.txt
stamp done
