#!/usr/bin/env bash
# Round 25 call B: this tree (the paired matvec at 72 registers for Q4_K / Q6_K / Q8_0, the plan from the
# smaller of the paired and 5-8-column residencies, the 9-16-column kernel requesting its next record into
# L2) against the tree before (specd.old): gpu_check --matmul-only (the kernels == mmv::Emulate under the
# new plan, every type, n = 1..40) and --spec; bench_against 2 and bench_multi 1; issue 11's side-by-side
# table with this tree (tests/gpu/peer_bench.sh, llama.cpp from .peer/llama-cuda.tar.xz).
# Pack: bash docs/runs/round25/pack-b.sh (and tests/gpu/pack_peer.sh for .peer), then
#   run(command="bash docs/runs/round25/callB.sh", carry=[".devpackF", ".peer"])
set -u
export DEVPACK=.devpackF/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
CHECK_TIMEOUT=170 gpu_checks --matmul-only
gpu_checks --spec
wait $mkpid
CTX64_VERIFY=1,7 bench_against 2 specd.old specd
bench_multi 1 specd.old specd
before 440 peer_bench && peer_table "this tree's specd"
stamp done
bundle_out
