#!/usr/bin/env bash
# Round 36 call P: the side-by-side table with this tree's specd and llama.cpp 0.3.36 on the same files in one
# call: the 6-layer pair (every row; `specd bench` now reads its logits into the pinned buffer, so the
# 7-token pass / decode row is the product's) and the ~80% pair's speculative rows.
#   pack: BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS=specd tests/gpu/make_carry.sh;
#         rm -f .devcarry/lib/{libssl.so.3,libcrypto.so.3,libstdc++.so.6}; mkdir -p .devpackP36
#         XZ_OPT=-9 tar -cJf .devpackP36/devcarry.tar.xz .devcarry
#         (then reconfigure build-cuda with -DSPECD_BUILD_TESTS=ON; CARRY_BINS="specd gpu_check" adds the check)
#   run(command="bash docs/runs/round36/callP.sh", carry=[".devpackP36", ".peer"])   (~8 min)
set -u
export DEVPACK=${DEVPACK:-.devpackP36/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
peer_libs
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M6"
stamp "peer_bench, 6-layer pair"
peer_run peer 250 SPEC_NS="3 6"
if before 420 "the ~80% pair"; then
  make_pair "$M8" --residual-gain 0.05
  stamp "peer_bench, ~80% pair, speculative rows"
  peer_run gain 150 RESIDUAL_GAIN=0.05 SPEC_ONLY=1 SPEC_NS="3 4 6"
fi
# A pack with gpu_check (a kernel changed since the last device check): its matvecs of the k-quants.
if [ -x "$C/bin/gpu_check" ] && before 460 "gpu_check"; then
  CHECK_TYPES=Q4_K,Q5_K,Q6_K,Q8_0 CHECK_TIMEOUT=$(( 570 - $(date +%s) + t0 )) gpu_checks --matmul-only
fi
stamp done
bundle_out
