#!/usr/bin/env bash
# Round 14 call D: the kept change (matvec rings of 2-3 slots, the tile's sums in the rings instead of
# static shared memory, the fetch pointer stepped; round 13's attention patch) against main
# (specd.base): gpu_check --quick and --no-matmul, decode / verify / batch 8 / draft.
set -u
# (The preamble moved to tests/gpu/device_lib.sh after the run: the same commands.)
. tests/gpu/device_lib.sh
device_setup
make_pair $M6 & mkpid=$!
stamp "bench-matvec"
timeout 60 $C/bin/gpu_check --bench-matvec > $O/mv.txt 2>&1; grep "^  " $O/mv.txt | sed -E 's/  n=(2|7|9) [^u]*us//g'
wait $mkpid
T=$M6/target.gguf
for rep in 1 2; do
for b in specd.base specd; do
  stamp "$b (rep $rep): target ctx 64 (batch 1, 8; verify 1, 4), ctx 4200 (verify 1, 4, 7); draft ctx 64"
  timeout 40 $C/bin/$b bench --backend cuda --model $T --ctx 64 --prefill 16 --batches 1,8 --verify-k 1,4 --reps 5 > $O/$b.ctx64.$rep.txt 2>&1
  sed -n '/^decode/,$p' $O/$b.ctx64.$rep.txt | grep "^ " | tr -s ' ' | tr '\n' '|'; echo
  timeout 60 $C/bin/$b bench --backend cuda --model $T --ctx 4200 --prefill 4096 --batches 1 --verify-k 1,4,7 --reps 5 > $O/$b.depth.$rep.txt 2>&1
  sed -n '/^decode/,$p' $O/$b.depth.$rep.txt | grep "^ " | tr -s ' ' | tr '\n' '|'; echo
  timeout 30 $C/bin/$b bench --backend cuda --model $M6/draft.gguf --ctx 64 --prefill 64 --batches 1 --verify-k 1 --reps 5 > $O/$b.draft.$rep.txt 2>&1
  sed -n '/^decode/,/^$/p' $O/$b.draft.$rep.txt | grep "^ " | tr -s ' ' | tr '\n' '|'; echo
done
done
stamp "gpu_check --no-matmul"
timeout 120 $C/bin/gpu_check --no-matmul > $O/check_nomm.log 2>&1; echo "rc=$?"
grep -E "^FAIL|SUMMARY" $O/check_nomm.log | head
stamp "gpu_check --quick"
timeout 240 $C/bin/gpu_check --quick > $O/check_quick.log 2>&1; echo "rc=$?"
grep -E "^FAIL|SUMMARY" $O/check_quick.log | head
cat $O/*.txt > $O/bench.log; xz -9 $O/bench.log; rm -f $O/*.txt
stamp done
