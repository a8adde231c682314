#!/usr/bin/env bash
# round 10 call D (one-off): llama.cpp side by side on the ~80% pair: llama-speculative-simple N = 4, 7, 8
# against specd in process (k = 4, 7, 8, adaptive) and through the three services (pipelined verify: k=7,
# adaptive); a fresh adaptive generate with the confidence cut off (--min-confidence 0)
set -u
O=/tmp/r10d; mkdir -p $O; R=${OUT:-/tmp/r10d_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
[ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
stamp "peer_bench (speculative rows)"
OUT=$O/peer RESIDUAL_GAIN=0.05 SPEC_ONLY=1 SPEC_NS="4 7 8" PEER_BUDGET_S=330 timeout 340 bash tests/gpu/peer_bench.sh 2>&1 | tail -n 20
M=/tmp/peer_models/qwen3-27b-g0.05-Q4_K_S-d6-Q4_K_M
export TARGET=$M/target.gguf DRAFT=$M/draft.gguf
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
P="The history of the city begins with a small harbour where fishermen"
stamp "generate adaptive, --min-confidence 0"
timeout 60 $C/bin/specd generate --backend cuda --max-seqs 1 --max-seq-len 2048 --max-tokens 256 --ignore-eos \
  --prompt "$P" --model $TARGET --draft $DRAFT --min-confidence 0 > $O/gen_adaptive_mc0.txt 2>&1
tail -n 3 $O/gen_adaptive_mc0.txt
grep -h "tok/s\|steps by" $O/peer/specd.log | tail -n 8
stamp "one stream through the services, adaptive (pipelined)"
OUT=$O/s1ad STREAMS=1 REQUESTS=4 TOKENS=256 timeout 110 bash tests/gpu/batch_spec.sh 2>&1 | tail -n 8
grep -h "ms_per_step" $O/s1ad/on.coord.log | tail -n 3
stamp done
tar -czf $R/r10d.tgz -C $O .
