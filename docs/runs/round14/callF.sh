#!/usr/bin/env bash
# Round 14 call F: six speculative streams through the three services (k = 4, ~80% pair) against six
# target-only streams; run twice (callF: the call-E build, callF_base: main's binaries). The last stage
# (bench at 4200) was added for a third run, with the final build, that had no device time left.
set -u
O=/tmp/r14f; mkdir -p $O; R=${OUT:-/tmp/r14f_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
[ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
M8=/tmp/peer_models/qwen3-27b-g0.05-Q4_K_S-d6-Q4_K_M
[ -f $M8/draft.gguf ] || timeout 120 $C/bin/specd make-model --preset qwen3-27b --type Q4_K_S --fill blocks --sync=false --pair \
  --draft-layers 6 --draft-type Q4_K_M --residual-gain 0.05 --out $M8 > $O/mk.txt 2>&1
stamp "six streams through the services, k = 4, ~80% pair"
OUT=$O/s6k4 TARGET=$M8/target.gguf DRAFT=$M8/draft.gguf TOKENS=256 SPEC_FLAGS="--k 4 --no-adaptive" timeout 240 bash tests/gpu/batch_spec.sh 2>&1 | tail -n 14
stamp "decode batch 1, 8 and verify k 4, 7 at 4200 (the ~80% pair's target: the same shape and types)"
timeout 60 $C/bin/specd bench --backend cuda --model $M8/target.gguf --ctx 4200 --prefill 4096 --batches 1,8 --verify-k 4,7 --reps 5 > $O/bench.txt 2>&1
sed -n '/^decode/,$p' $O/bench.txt | grep "^ " | tr -s ' ' | tr '\n' '|'; echo
stamp done
tar -czf $R/r14f.tgz -C $O .
