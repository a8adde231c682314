#!/usr/bin/env bash
# Round 15 call F: the kept change (SwiGLU quantizes each group with 8 warps, QuantizeGroupBlock; RMSNorm
# is main's again after call E): gpu_check --no-matmul, specd bench against main (specd.base) twice,
# alternating, then the side-by-side table with llama.cpp (tests/gpu/peer_bench.sh, same files, same call).
# run(command="bash docs/runs/round15/callF.sh", carry=[".devpack", ".peer"])
set -u
. tests/gpu/device_lib.sh
device_setup
make_pair $M6 & mkpid=$!
stamp "gpu_check --no-matmul"
timeout 150 $C/bin/gpu_check --no-matmul > $O/check_nomatmul.log 2>&1; echo "rc=$?"
grep -E "^FAIL|SUMMARY" $O/check_nomatmul.log | head -20
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
cat $O/*.txt > $O/bench.log; xz -9 $O/bench.log; rm -f $O/*.txt
stamp "peer side by side"
SPEC_NS="3 6" PEER_BUDGET_S=300 bash tests/gpu/peer_bench.sh 2>&1 | tail -45
stamp done
