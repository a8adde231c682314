#!/usr/bin/env bash
# Round 24 call B: two-slot rings for the paired and 5-8-column matvecs (this tree) against the tree before
# (specd.old): gpu_check --matmul-only (the kernels == mmv::Emulate under the new plan, every type,
# n = 1..40) and --spec; bench_against (target at context 64 and 4200, the draft); bench_multi (batch 6 / 8
# and six sequences' verify 4 at 1024) with specd.m2 (the 16-column kernel at 2 slots too); issue 11's
# side-by-side table with this tree (tests/gpu/peer_bench.sh, llama.cpp from .peer/llama-cuda.tar.xz).
# Pack: bash docs/runs/round24/pack-b.sh (and tests/gpu/pack_peer.sh for .peer), then
#   run(command="bash docs/runs/round24/callB.sh", carry=[".devpackB", ".peer"])
set -u
export DEVPACK=.devpackB/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
CHECK_TIMEOUT=170 gpu_checks --matmul-only
gpu_checks --spec
wait $mkpid
CTX64_VERIFY=1,7 bench_against 2 specd.old specd
bench_multi 1 specd.old specd specd.m2
before 440 peer_bench && peer_table "this tree's specd"
stamp done
bundle_out
