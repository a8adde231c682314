#!/usr/bin/env bash
# Round 15 call H: RMSNorm as a block of 8 warps per (group, row) on as many SMs, each block summing the
# row's squares itself, the row's last block writing the residual (x + add) and in-place outputs (counters
# per row). specd.base = call F's build (SwiGLU change, main's RMSNorm). gpu_check --no-matmul (fused
# quantization bytes, counters back at zero, every model, verify == decode), ncu per-kernel times (1 x 1
# at 1100), specd bench against specd.base twice, alternating.
set -u
. tests/gpu/device_lib.sh
device_setup
make_pair $M6 & mkpid=$!
stamp "gpu_check --no-matmul"
timeout 150 $C/bin/gpu_check --no-matmul > $O/check_nomatmul.log 2>&1; echo "rc=$?"
grep -E "^FAIL|SUMMARY" $O/check_nomatmul.log | head -20
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
stamp "ncu: 1 x 1 at 1100"
timeout 100 $NCU --clock-control none --cache-control none --profile-from-start off --metrics gpu__time_duration.sum \
  --csv --print-units base $C/bin/gpu_check --profile-step 1 1 1100 > $O/ncu_s1t1.csv 2> /dev/null
python3 tests/gpu/ncu_kernels.py $O/ncu_s1t1.csv --top 8
xz -9 $O/ncu_*.csv
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
stamp done
