#!/usr/bin/env bash
# Round 15 call A: the paired matvec (decode, verifies of 1-3 drafts) with the activations staged in its
# ring slots (specd: main's slot counts; specd.xb: slots budgeted with the stage), round 14's prepared
# attention patch alone (specd.attn; also in specd and specd.xb), against main (specd.base).
# gpu_check --matmul-only (kernel == host emulation bit for bit, n = 1..40) and --no-matmul.
# Builds (experiment only, none kept): specd = exp-xstage.patch + round 14's next-attn-staged-quant.patch;
# specd.xb = the same with the paired kernel's slots budgeted with the stage (MmvStages: 10240 / (rec +
# XsBytes(1))); specd.attn = the attention patch alone. Result: all slower or neutral (PERFORMANCE.md round 15).
set -u
. tests/gpu/device_lib.sh
device_setup
make_pair $M6 & mkpid=$!
stamp "gpu_check --matmul-only"
timeout 150 $C/bin/gpu_check --matmul-only > $O/check_matmul.log 2>&1; echo "rc=$?"
grep -E "^FAIL|SUMMARY" $O/check_matmul.log | head
stamp "gpu_check --no-matmul"
timeout 120 $C/bin/gpu_check --no-matmul > $O/check_nomatmul.log 2>&1; echo "rc=$?"
grep -E "^FAIL|SUMMARY" $O/check_nomatmul.log | head
stamp "gpu_check --bench-matvec"
timeout 60 $C/bin/gpu_check --bench-matvec > $O/bench_matvec.log 2>&1; echo "rc=$?"
tail -30 $O/bench_matvec.log
wait $mkpid
T=$M6/target.gguf
for rep in 1 2; do
  for b in specd.base specd.attn specd specd.xb; do
    stamp "$b (rep $rep): target ctx 64 (batch 1, 8; verify 1, 3, 4), ctx 4200 (verify 1, 4, 7); draft ctx 64"
    timeout 40 $C/bin/$b bench --backend cuda --model $T --ctx 64 --prefill 16 --batches 1,8 --verify-k 1,3,4 --reps 5 > $O/$b.ctx64.$rep.txt 2>&1
    sed -n '/^decode/,$p' $O/$b.ctx64.$rep.txt | grep "^ " | tr -s ' ' | tr '\n' '|'; echo
    timeout 60 $C/bin/$b bench --backend cuda --model $T --ctx 4200 --prefill 4096 --batches 1 --verify-k 1,4,7 --reps 5 > $O/$b.depth.$rep.txt 2>&1
    sed -n '/^decode/,$p' $O/$b.depth.$rep.txt | grep "^ " | tr -s ' ' | tr '\n' '|'; echo
    timeout 30 $C/bin/$b bench --backend cuda --model $M6/draft.gguf --ctx 64 --prefill 64 --batches 1 --verify-k 1 --reps 5 > $O/$b.draft.$rep.txt 2>&1
    sed -n '/^decode/,/^$/p' $O/$b.draft.$rep.txt | grep "^ " | tr -s ' ' | tr '\n' '|'; echo
  done
done
cat $O/*.txt > $O/bench.log; xz -9 $O/bench.log; rm -f $O/*.txt
stamp done
