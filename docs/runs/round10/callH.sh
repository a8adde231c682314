#!/usr/bin/env bash
# round 10 call H (one-off): fresh generate on the ~80% pair with the backends' graph figures: k=4, k=7, adaptive
set -u
O=/tmp/r10h; mkdir -p $O
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
[ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
M=/tmp/peer_models/qwen3-27b-g0.05-Q4_K_S-d6-Q4_K_M
[ -f $M/target.gguf ] || OUT=$O/round RESIDUAL_GAIN=0.05 bash tests/gpu/device_round.sh pair27 > $O/round.log 2>&1
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
P="The history of the city begins with a small harbour where fishermen"
for k in 4 7 adaptive adaptive2; do
  stamp "generate $k"
  f="--k ${k%2}"; [ ${k%2} = adaptive ] && f=""
  timeout 60 $C/bin/specd generate --backend cuda --max-seqs 1 --max-seq-len 2048 --max-tokens 256 --ignore-eos \
    --prompt "$P" --model $M/target.gguf --draft $M/draft.gguf $f > $O/gen_$k.txt 2>&1
  grep -E "tok/s|^step time|graphs" $O/gen_$k.txt | cut -c1-330
done
stamp done
tar -czf ${OUT:-/tmp}/r10h.tgz -C $O .
