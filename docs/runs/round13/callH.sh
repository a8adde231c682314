#!/usr/bin/env bash
# Prepared for the next session (not run in round 13): after `git apply
# docs/runs/round13/next-attn-chain.patch`, build specd + gpu_check into .devcarry (specd.base = main's
# specd), then run(command="bash docs/runs/round13/callH.sh", carry=[".devpack"]):
# gpu_check --no-matmul (attention at contexts 0-509, decode == verify bit for bit, every arch and KV
# type), decode at context 64 and 4200, verifies, the draft, against main; ncu's us per attention launch.
set -u
R=${OUT:-/tmp/r13h_out}; mkdir -p $R; O=$R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
[ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
M6=/tmp/peer_models/qwen3-27b-Q4_K_S-d6-Q4_K_M
( [ -f $M6/target.gguf ] || timeout 120 $C/bin/specd make-model --preset qwen3-27b --type Q4_K_S --fill blocks --sync=false \
  --pair --draft-layers 6 --draft-type Q4_K_M --out $M6 > $O/mk.txt 2>&1 ) & mkpid=$!
stamp "gpu_check --no-matmul"
timeout 150 $C/bin/gpu_check --no-matmul > $O/check.log 2>&1; echo "check rc=$?"
grep -E "^FAIL|SUMMARY" $O/check.log | head -20
wait $mkpid
T=$M6/target.gguf
for b in specd.base specd; do
  stamp "$b: decode ctx 4200 batch 1, verify k 1,4,7; ctx 64 (f16 and q8_0 KV); draft"
  timeout 60 $C/bin/$b bench --backend cuda --model $T --ctx 4200 --prefill 4096 --batches 1 --verify-k 1,4,7 --reps 5 > $O/$b.depth.txt 2>&1
  sed -n '/^decode/,$p' $O/$b.depth.txt | grep -v "^$\|roofline [0-9]"
  for kv in f16 q8_0; do
    timeout 40 $C/bin/$b bench --backend cuda --model $T --ctx 64 --prefill 16 --batches 1 --verify-k 1,4 --reps 5 --kv-type $kv > $O/$b.ctx64.$kv.txt 2>&1
    echo "kv $kv:"; sed -n '/^decode/,$p' $O/$b.ctx64.$kv.txt | grep "^ "
  done
  timeout 30 $C/bin/$b bench --backend cuda --model $M6/draft.gguf --ctx 64 --prefill 64 --batches 1 --verify-k 1 --reps 5 > $O/$b.draft.txt 2>&1
  sed -n '/^decode/,/^$/p' $O/$b.draft.txt | grep "^ "
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for b in specd.base specd; do
  timeout 100 $NCU --metrics gpu__time_duration.sum --csv --print-units base --clock-control none --launch-count 1500 \
    $C/bin/$b bench --backend cuda --model $M6/draft.gguf --ctx 64 --prefill 16 --batches 1 --verify-k 1 --reps 2 > $O/ncu.$b.csv 2>/dev/null
  python3 tests/gpu/ncu_kernels.py $O/ncu.$b.csv --match AttnSplitV2 | tail -n 1 | sed "s/^/$b: /" || true
done
xz -9 $O/*.csv
stamp done
