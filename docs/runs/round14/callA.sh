#!/usr/bin/env bash
# Round 14 call A: round 13's prepared attention patch (specd) against main (specd.base), bit identity
# (gpu_check --no-matmul), and an ablation of the decode step (SPECD_ABLATE=op,...: an experiment-only
# build that skips those ops; the time they take in the captured step, not a result).
set -u
# (The preamble moved to tests/gpu/device_lib.sh after the run: the same commands.)
. tests/gpu/device_lib.sh
device_setup
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader
ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -2
make_pair $M6 & mkpid=$!
stamp "gpu_check --no-matmul"
timeout 150 $C/bin/gpu_check --no-matmul > $O/check.log 2>&1; echo "check rc=$?"
grep -E "^FAIL|SUMMARY" $O/check.log | head -20
wait $mkpid
T=$M6/target.gguf
for b in specd.base specd; do
  stamp "$b: target ctx 64, ctx 4200 (verify 1,4,7); draft ctx 64"
  timeout 40 $C/bin/$b bench --backend cuda --model $T --ctx 64 --prefill 16 --batches 1 --verify-k 1,4 --reps 5 > $O/$b.ctx64.txt 2>&1
  sed -n '/^decode/,$p' $O/$b.ctx64.txt | grep "^ "
  timeout 60 $C/bin/$b bench --backend cuda --model $T --ctx 4200 --prefill 4096 --batches 1 --verify-k 1,4,7 --reps 5 > $O/$b.depth.txt 2>&1
  sed -n '/^decode/,$p' $O/$b.depth.txt | grep -v "^$\|roofline [0-9]"
  timeout 30 $C/bin/$b bench --backend cuda --model $M6/draft.gguf --ctx 64 --prefill 64 --batches 1 --verify-k 1 --reps 5 > $O/$b.draft.txt 2>&1
  sed -n '/^decode/,/^$/p' $O/$b.draft.txt | grep "^ "
done
stamp "ablation (specd): target decode batch 1 at ctx 64 and 2048"
for a in none attention rmsnorm rope swiglu attention,rmsnorm,rope,swiglu matmul; do
  for ctx in 64 2048; do
    SPECD_ABLATE=$a timeout 40 $C/bin/specd bench --backend cuda --model $T --ctx $ctx --prefill 16 --batches 1 --verify-k 4 --reps 5 > $O/abl.$a.$ctx.txt 2>&1
    echo "ablate $a ctx $ctx: $(sed -n '/^decode/,$p' $O/abl.$a.$ctx.txt | grep '^ ' | tr -s ' ' | tr '\n' '|')"
  done
done
stamp done
