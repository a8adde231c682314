#!/usr/bin/env bash
# round 9 call C (one-off): the fast dequantization: correctness, prefill, six streams
set -u
O=/tmp/r9c; mkdir -p $O; R=${OUT:-/tmp/r9c_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
OUT=$O/round RESIDUAL_GAIN=0.05 bash tests/gpu/device_round.sh pair27 > $O/round.log 2>&1
M=/tmp/peer_models/qwen3-27b-g0.05-Q4_K_S-d6-Q4_K_M; T=$M/target.gguf
export TARGET=$M/target.gguf DRAFT=$M/draft.gguf
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
for n in 64 128 256 512 1024; do
  stamp "prefill $n"
  timeout 60 $C/bin/specd bench --backend cuda --model $T --ctx 1100 --prefill $n --batches 1 --verify-k 1 --reps 2 > $O/pf$n.txt 2>&1
  grep -E "prefill:|decode|rror" $O/pf$n.txt | head -3
done
stamp "six streams, lockstep, k=4"
OUT=$O/ls6 SPEC_FLAGS="--k 4 --no-adaptive" timeout 150 bash tests/gpu/batch_spec.sh 2>&1 | tail -n 14
stamp "six streams adaptive"
OUT=$O/b6 timeout 150 bash tests/gpu/batch_spec.sh 2>&1 | tail -n 14
P="The quick brown fox jumps over the lazy dog and then"
for k in 7 adaptive; do
  stamp "generate $k"
  f="--k $k"; [ $k = adaptive ] && f=""
  timeout 60 $C/bin/specd generate --backend cuda --max-seqs 1 --max-seq-len 2048 --max-tokens 256 --ignore-eos \
    --prompt "$P" --model $TARGET --draft $DRAFT $f > $O/gen_$k.txt 2>&1
  tail -n 4 $O/gen_$k.txt
done
stamp "gpu_check --quick"
(LD_LIBRARY_PATH="$(pwd)/.gpu_carry/lib:/usr/local/cuda/lib64" timeout 200 .gpu_carry/bin/gpu_check --quick > $O/check.log 2>&1; echo "check rc=$?")
grep -E "^FAIL|SUMMARY|passed|reference \(dequantize|cuBLAS path" $O/check.log | head -40
stamp done
tar -czf $R/r9c.tgz -C $O .
