#!/usr/bin/env bash
# round 9 call D (one-off): warm prefill against llama.cpp's pp; six streams with 256-token outputs
set -u
O=/tmp/r9d; mkdir -p $O; R=${OUT:-/tmp/r9d_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
OUT=$O/round RESIDUAL_GAIN=0.05 bash tests/gpu/device_round.sh pair27 > $O/round.log 2>&1
M=/tmp/peer_models/qwen3-27b-g0.05-Q4_K_S-d6-Q4_K_M; T=$M/target.gguf
export TARGET=$M/target.gguf DRAFT=$M/draft.gguf
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
for n in 128 512; do
  stamp "prefill $n"
  timeout 60 $C/bin/specd bench --backend cuda --model $T --ctx 64 --prefill $n --batches 1 --verify-k 1 --reps 3 > $O/pf$n.txt 2>&1
  grep -E "prefill:|rror" $O/pf$n.txt | head -3
done
mkdir -p /tmp/peer && tar -C /tmp/peer -xJf .peer/llama-cuda.tar.xz
nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
stamp "llama-bench pp"
LD_LIBRARY_PATH="/tmp/peer/llama-cuda/lib:/usr/local/cuda/lib64:${nccl:+$nccl:}" timeout 80 /tmp/peer/llama-cuda/bin/llama-bench -m $T -ngl 99 -fa 1 -p 128,512 -n 0 -r 2 -o md > $O/llama_pp.txt 2>&1
tail -n 4 $O/llama_pp.txt
stamp "six streams, 256 tokens, k=4"
OUT=$O/ls6t256 TOKENS=256 SPEC_FLAGS="--k 4 --no-adaptive" timeout 170 bash tests/gpu/batch_spec.sh 2>&1 | tail -n 14
stamp done
tar -czf $R/r9d.tgz -C $O .
