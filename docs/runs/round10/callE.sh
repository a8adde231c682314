#!/usr/bin/env bash
# round 10 call E (one-off): the full side-by-side table on the 6-layer pair (tests/gpu/peer_bench.sh:
# decode, passes, prefill, the draft, generate, speculation N/k = 2, 3, 4, 6)
set -u
O=/tmp/r10e; mkdir -p $O
OUT=$O SPEC_NS="2 3 4 6" PEER_BUDGET_S=520 timeout 560 bash tests/gpu/peer_bench.sh 2>&1 | tail -n 45
tar -czf ${OUT:-/tmp}/r10e.tgz -C $O .
