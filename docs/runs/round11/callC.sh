#!/usr/bin/env bash
# round 11 call C (one-off): issue 12's figures with the round-11 matvec (ring + paired levels):
# the ~80% pair side by side with llama-speculative-simple (in process k = 3, 4, 7, adaptive), six streams
# through the services (128 + 256 tokens, k = 4, pipelined), one stream through the services (adaptive)
set -u
O=/tmp/r11c; mkdir -p $O; R=${OUT:-/tmp/r11c_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
[ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
stamp "peer_bench (speculative rows, ~80% pair)"
OUT=$O/peer RESIDUAL_GAIN=0.05 SPEC_ONLY=1 SPEC_NS="3 4 7" PEER_BUDGET_S=200 timeout 210 bash tests/gpu/peer_bench.sh 2>&1 | tail -n 16
M=/tmp/peer_models/qwen3-27b-g0.05-Q4_K_S-d6-Q4_K_M
export TARGET=$M/target.gguf DRAFT=$M/draft.gguf
grep -h "tok/s\|steps by" $O/peer/specd.log | tail -n 10
stamp "six streams, 128 + 256 tokens, k=4 (pipelined)"
OUT=$O/s6k4 TOKENS=256 SPEC_FLAGS="--k 4 --no-adaptive" timeout 170 bash tests/gpu/batch_spec.sh 2>&1 | tail -n 12
stamp "one stream through the services, adaptive"
OUT=$O/s1ad STREAMS=1 REQUESTS=4 TOKENS=256 timeout 110 bash tests/gpu/batch_spec.sh 2>&1 | tail -n 8
grep -h "ms_per_step" $O/s1ad/on.coord.log | tail -n 2
stamp done
tar -czf $R/r11c.tgz -C $O .
