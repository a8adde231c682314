#!/usr/bin/env bash
# Round 14 call E: the kept change (matvec kernels of 5-16 columns: 3 ring slots, sums in the rings;
# round 13's attention patch) against main (specd.base), gpu_check --quick, then the side-by-side
# table with llama.cpp (tests/gpu/peer_bench.sh, same files, same call).
set -u
# (The preamble moved to tests/gpu/device_lib.sh after the run: the same commands.)
. tests/gpu/device_lib.sh
device_setup
make_pair $M6 & mkpid=$!
stamp "gpu_check --quick"
timeout 200 $C/bin/gpu_check --quick > $O/check_quick.log 2>&1; echo "rc=$?"
grep -E "^FAIL|SUMMARY" $O/check_quick.log | head
wait $mkpid
T=$M6/target.gguf
for b in specd.base specd; do
  stamp "$b: target ctx 64 (batch 1, 8; verify 1, 4), ctx 4200 (verify 1, 4, 7); draft ctx 64"
  timeout 40 $C/bin/$b bench --backend cuda --model $T --ctx 64 --prefill 16 --batches 1,8 --verify-k 1,4 --reps 5 > $O/$b.ctx64.txt 2>&1
  sed -n '/^decode/,$p' $O/$b.ctx64.txt | grep "^ " | tr -s ' ' | tr '\n' '|'; echo
  timeout 60 $C/bin/$b bench --backend cuda --model $T --ctx 4200 --prefill 4096 --batches 1 --verify-k 1,4,7 --reps 5 > $O/$b.depth.txt 2>&1
  sed -n '/^decode/,$p' $O/$b.depth.txt | grep "^ " | tr -s ' ' | tr '\n' '|'; echo
  timeout 30 $C/bin/$b bench --backend cuda --model $M6/draft.gguf --ctx 64 --prefill 64 --batches 1 --verify-k 1 --reps 5 > $O/$b.draft.txt 2>&1
  sed -n '/^decode/,/^$/p' $O/$b.draft.txt | grep "^ " | tr -s ' ' | tr '\n' '|'; echo
done
cat $O/*.txt > $O/bench.log; xz -9 $O/bench.log; rm -f $O/*.txt
stamp "peer side by side"
SPEC_NS="3 6" PEER_BUDGET_S=300 bash tests/gpu/peer_bench.sh 2>&1 | tail -45
stamp done
