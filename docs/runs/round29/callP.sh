#!/usr/bin/env bash
# Round 29, call P: the side-by-side table (tests/gpu/peer_bench.sh, llama.cpp 0.3.36 from .peer) on a fresh
# machine, asked as an H200 (issue 11's and 12's targets are the H200's; the last H200 table is round 23's):
# specd the tree (c6dc213, the same kernels as round 28's merge-kernel build) from .devpackP (specd alone),
# speculation at N = 3 and 6 and adaptive.
#   pack: BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS=specd tests/gpu/make_carry.sh;
#         XZ_OPT=-9 tar -cJf .devpackP/devcarry.tar.xz .devcarry
#   run(command="bash docs/runs/round29/callP.sh", carry=[".devpackP", ".peer"], kind="nvidia-h200")
set -u
export DEVPACK=.devpackP/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6"
stamp "peer_bench (specd: the tree)"
SPECD_BIN=$C/bin/specd SPEC_NS="3 6" PEER_BUDGET_S=400 OUT=$O/peer timeout 420 bash tests/gpu/peer_bench.sh > /dev/null 2>&1
echo "rc=$?"
cat "$O/peer/table.md" 2> /dev/null
stamp done
bundle_out
