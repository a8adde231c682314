#!/usr/bin/env bash
# round 13 call F: the side-by-side table with llama.cpp on the 6-layer pair (peer_bench) with the
# committed build (the dequantization fix, 512-token forwards by default)
set -u
O=/tmp/r13f; mkdir -p $O; R=${OUT:-/tmp/r13f_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
stamp "peer_bench, 6-layer pair"
OUT=$O/peer SPEC_NS="3 6" PEER_BUDGET_S=330 timeout 340 bash tests/gpu/peer_bench.sh 2>&1 | tail -n 34
stamp done
tar -czf $R/r13f.tgz -C $O .
