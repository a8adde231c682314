#!/usr/bin/env bash
# Round 15 call I (on call H's warm machine, the same build): the side-by-side table with llama.cpp,
# run(command="bash docs/runs/round15/callI.sh", carry=[".devpack", ".peer"]).
. tests/gpu/device_lib.sh
device_setup
SPEC_NS="3" PEER_BUDGET_S=200 timeout 240 bash tests/gpu/peer_bench.sh 2>&1 | tee $O/callI.log | tail -40
