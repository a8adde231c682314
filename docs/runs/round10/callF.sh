#!/usr/bin/env bash
# round 10 call F (one-off): six streams (128 + 256 tokens, k=4) with the sequential verify, against call B's pipelined run
set -u
O=/tmp/r10f; mkdir -p $O
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
[ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
M=/tmp/peer_models/qwen3-27b-g0.05-Q4_K_S-d6-Q4_K_M
[ -f $M/target.gguf ] || OUT=$O/round RESIDUAL_GAIN=0.05 bash tests/gpu/device_round.sh pair27 > $O/round.log 2>&1
export TARGET=$M/target.gguf DRAFT=$M/draft.gguf
for p in false true; do
  stamp "six streams, 128 + 256 tokens, k=4, pipeline-verify=$p"
  OUT=$O/s6k4_$p TOKENS=256 SPEC_FLAGS="--k 4 --no-adaptive" COORD_FLAGS="--pipeline-verify=$p" \
    timeout 150 bash tests/gpu/batch_spec.sh 2>&1 | tail -n 12
done
stamp done
tar -czf ${OUT:-/tmp}/r10f.tgz -C $O .
