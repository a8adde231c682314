#!/usr/bin/env bash
# Round 33 call P: the side-by-side table (tests/gpu/peer_bench.sh, llama.cpp 0.3.36 from .peer) with the
# tree's specd (765ce41: round 32's quantized prompt GEMM, so the prefill rows are side by side for the first
# time), speculation at N = 3 and 6 and adaptive on the 6-layer pair, N = 3, 4, 6 on the ~80% pair (the
# wgmma prototype runs in callW.sh: the pack, the tree and .peer come to just over the 64-MiB carry limit).
#   pack: BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS=specd tests/gpu/make_carry.sh;
#         rm .devcarry/lib/{libssl.so.3,libcrypto.so.3,libstdc++.so.6}   (the peer's lib has the same files:
#           with them the pack, the tree and .peer exceed the 64-MiB carry limit)
#         XZ_OPT=-9 tar -cJf .devpackP33/devcarry.tar.xz .devcarry
#   run(command="bash docs/runs/round33/callP.sh", carry=[".devpackP33", ".peer"])
#   (GAIN_PAIR=0: the 6-layer pair only; PEER_S: its budget in s, default 300)
set -u
export DEVPACK=${DEVPACK:-.devpackP33/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
peer_libs
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M6"
stamp "peer_bench, 6-layer pair (specd: the tree)"
peer_run peer "${PEER_S:-300}" SPEC_NS="3 6"
if [ "${GAIN_PAIR:-1}" = 1 ]; then
  make_pair "$M8" --residual-gain 0.05
  stamp "peer_bench, ~80% pair, speculative rows"
  peer_run gain 150 RESIDUAL_GAIN=0.05 SPEC_ONLY=1 SPEC_NS="3 4 6"
fi
stamp done
bundle_out
