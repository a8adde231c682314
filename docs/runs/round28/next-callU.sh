#!/usr/bin/env bash
# Prepared for the next device session (not run). With the merge in a kernel of its own (round 28), the
# decode's attention at context 64 is the split kernel's chain: Q's loads, the MMAs, the warps' merge tree
# (round 27's trace: 2.9 + 4.5 us after the wait).
#  1. gpu_check.pe and gpu_check.ms --attn-only --no-matmul (decode == verify(7) == a 16-token batch, both
#     KV types, against the CPU);
#  2. bench_against 2 and bench_multi 1: this tree against specd.pe (positions read before the wait),
#     specd.al1 / specd.al2 (the merge kernel launched after Q's loads / before the partials) and specd.ms
#     (the merge kernel's short rows requesting 8 entries, not 48).
# Pack: bash docs/runs/round28/next-pack-u.sh, then
#   run(command="bash docs/runs/round28/next-callU.sh", carry=[".devpackU"])
# On the same warm machine within 30 s: run(command="bash docs/runs/round28/callP.sh", carry=[".peer"])
# (the side-by-side table; on an H200 if one is lent: issue 11's targets are the H200's).
set -u
export DEVPACK=.devpackU/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
GPU_CHECK=gpu_check.pe gpu_checks --attn-only --no-matmul
GPU_CHECK=gpu_check.ms gpu_checks --attn-only --no-matmul
wait $mkpid
CTX64_VERIFY=1,7 bench_against 2 specd specd.pe specd.ms specd.al1 specd.al2
bench_multi 1 specd specd.pe specd.ms specd.al1 specd.al2
stamp done
bundle_out
