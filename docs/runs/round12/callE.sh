#!/usr/bin/env bash
# round 12 call E (one-off): the side-by-side table with llama.cpp on the 6-layer pair (peer_bench), then
# the speculative rows on the ~80% pair, with the final build (calls C/D's kernels, the verify warm-up)
set -u
O=/tmp/r12e; mkdir -p $O; R=${OUT:-/tmp/r12e_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
stamp "peer_bench, 6-layer pair"
OUT=$O/peer SPEC_NS="3 6" PEER_BUDGET_S=270 timeout 280 bash tests/gpu/peer_bench.sh 2>&1 | tail -n 32
stamp "peer_bench speculative rows, ~80% pair"
OUT=$O/peer80 RESIDUAL_GAIN=0.05 SPEC_ONLY=1 SPEC_NS="4 7" PEER_BUDGET_S=150 timeout 160 bash tests/gpu/peer_bench.sh 2>&1 | grep -E "speculative|acceptance|done"
grep -h "tok/s" $O/peer80/specd.log | tail -n 3
stamp done
tar -czf $R/r12e.tgz -C $O .
