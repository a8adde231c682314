#!/usr/bin/env bash
# round 9 call A (one-off): lockstep, batch6, overhead split, fresh adaptive generate
set -u
O=/tmp/r9a; mkdir -p $O; R=${OUT:-/tmp/r9a_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
OUT=$O/round RESIDUAL_GAIN=0.05 BATCH_S=150 bash tests/gpu/device_round.sh pair27 lockstep6 > $O/round.log 2>&1
tail -n 60 $O/round.log
M=/tmp/peer_models/qwen3-27b-g0.05-Q4_K_S-d6-Q4_K_M
export TARGET=$M/target.gguf DRAFT=$M/draft.gguf
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
for m in k4 adaptive; do
  f="--k 4 --no-adaptive"; [ $m = adaptive ] && f=""
  stamp "one stream $m"
  OUT=$O/s1$m STREAMS=1 REQUESTS=4 TOKENS=256 SPEC_FLAGS="$f" timeout 120 bash tests/gpu/batch_spec.sh 2>&1 | tail -n 12
  grep -h "ms_per_step" $O/s1$m/on.coord.log | tail -n 3
done
stamp "one stream sampled adaptive"
OUT=$O/s1samp STREAMS=1 REQUESTS=4 TOKENS=256 SAMPLE_FLAGS="--temperature 0.7 --top-p 0.9" timeout 120 bash tests/gpu/batch_spec.sh 2>&1 | tail -n 12
grep -h "ms_per_step" $O/s1samp/on.coord.log | tail -n 3
P="The quick brown fox jumps over the lazy dog and then"
for k in 4 7 adaptive; do
  stamp "generate $k"
  f="--k $k"; [ $k = adaptive ] && f=""
  timeout 60 $C/bin/specd generate --backend cuda --max-seqs 1 --max-seq-len 2048 --max-tokens 256 --ignore-eos \
    --prompt "$P" --model $TARGET --draft $DRAFT $f > $O/gen_$k.txt 2>&1
  tail -n 4 $O/gen_$k.txt
done
stamp "six streams adaptive (batch6)"
OUT=$O/batch6 timeout 150 bash tests/gpu/batch_spec.sh 2>&1 | tail -n 14
stamp done
tar -czf $R/r9a.tgz -C $O .
