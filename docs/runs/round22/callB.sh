#!/usr/bin/env bash
# Round 22 call B: issue 11's side-by-side table with this tree's specd (tests/gpu/peer_bench.sh on the
# 6-layer pair: llama-bench and specd bench / generate on the same files), llama.cpp from
# .peer/llama-cuda.tar.xz (the 0.3.36 sdist built on the CPU machine, tests/gpu/pack_peer.sh /work/peer/lcb).
# .devpackB/devcarry.tar.xz holds this tree's specd and its libraries (docs/runs/round22/pack.sh).
#   run(command="bash docs/runs/round22/callB.sh", carry=[".devpackB", ".peer"], kind="nvidia-h200")
set -u
[ -d .devcarry ] || tar -xJf .devpackB/devcarry.tar.xz
export LD_LIBRARY_PATH="$PWD/.devcarry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
SPECD_BIN=$PWD/.devcarry/bin/specd SPEC_NS=${SPEC_NS:-3} PEER_BUDGET_S=${PEER_BUDGET_S:-560} bash tests/gpu/peer_bench.sh
cat "${OUT:-/tmp/peer_out}/table.md"
