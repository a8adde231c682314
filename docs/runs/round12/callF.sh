#!/usr/bin/env bash
# round 12 call F (one-off): the verify warm-up with a whole prefill chunk as its scratch prompt (so that
# the first request's prefill no longer grows the buffers and drops the warm-up's graphs): fresh
# generates on the ~80% pair, k = 7 and adaptive, warm-up on and off
set -u
O=/tmp/r12f; mkdir -p $O; R=${OUT:-/tmp/r12f_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
[ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
M8=/tmp/peer_models/qwen3-27b-g0.05-Q4_K_S-d6-Q4_K_M
[ -f $M8/target.gguf ] || timeout 120 $C/bin/specd make-model --preset qwen3-27b --type Q4_K_S --fill blocks --sync=false \
  --pair --draft-layers 6 --draft-type Q4_K_M --residual-gain 0.05 --out $M8 > $O/mk.txt 2>&1
P="The history of the city begins with a small harbour where fishermen"
G=(generate --backend cuda --max-seqs 1 --max-seq-len 2048 --max-tokens 256 --ignore-eos --prompt "$P" --model $M8/target.gguf --draft $M8/draft.gguf)
for k in 7 adaptive adaptive adaptive-nowarm 7-dbg; do
  stamp "fresh generate ~80% pair, $k"
  KF=(--k $k); [ $k = adaptive ] && KF=(); [ $k = adaptive-nowarm ] && KF=(--warmup=false); [ $k = 7-dbg ] && KF=(--k 7 --log-level debug)
  timeout 60 $C/bin/specd "${G[@]}" "${KF[@]}" > $O/gen.$k.txt 2>&1
  grep -h "tok/s\|target graphs" $O/gen.$k.txt
done
grep -h "cuda graph capture" $O/gen.7-dbg.txt | sed 's/.*cuda graph capture//' | cut -c1-150 | head -n 30
stamp done
tar -czf $R/r12f.tgz -C $O .
