#!/usr/bin/env bash
# Prepared (not run): specd bench with its logits buffer pinned (pin, next-bench-pin.patch: Backend::PinHost and
# Engine::RunInto, a pinned buffer written as is, as llama.cpp's output buffer) against the tree, then the side-by-side table with the tree, which
# now has the draft alone through generate beside llama-completion.
# Round 34's call P: a proposal's draft forwards ran 1.07 ms each (`specd generate --k 3`'s step anatomy)
# where `specd bench` of the draft ran 1.22 ms a step (819 tok/s: 1.27x llama-bench's tg128); the bench
# reads each step's 151936-float logits row into pageable memory (the driver's staged copy) and syncs.
#   run(command="bash docs/runs/round34/next-callN.sh", carry=[".devpackN34", ".peer"])   (next-pack-n.sh)
#  1. bench_against 2 specd specd.pin: the target at 64 (batch 1, 8; verify 1, 4) and 4200 (verify 1, 4, 7),
#     the draft at 64, alternating;
#  2. peer_bench on the 6-layer pair with the tree's specd (PEER_S, default 220 s).
set -u
export DEVPACK=${DEVPACK:-.devpackN34/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
peer_libs
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M6"
bench_against 2 specd specd.pin
stamp "peer_bench, 6-layer pair (specd: the tree)"
peer_run peer "${PEER_S:-220}" SPEC_NS="3 6"
stamp done
bundle_out
