#!/usr/bin/env bash
# Round 28 call P: the side-by-side table (tests/gpu/peer_bench.sh) on call S's warm machine, carry
# [".peer"] (llama.cpp 0.3.36 built here: tests/gpu/pack_peer.sh), its specd the build named by $1
# (default specd: the tree) from call S's unpacked .devcarry; the pair call S made in /tmp/peer_models.
set -u
. tests/gpu/device_lib.sh
device_setup
stamp "peer_bench with $C/bin/${1:-specd}"
SPECD_BIN=$C/bin/${1:-specd} SPEC_NS=3 PEER_BUDGET_S=150 OUT=$O/peer timeout 160 bash tests/gpu/peer_bench.sh > /dev/null 2>&1
echo "rc=$?"
cat "$O/peer/table.md" 2> /dev/null
stamp done
bundle_out
