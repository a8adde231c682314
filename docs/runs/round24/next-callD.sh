#!/usr/bin/env bash
# Prepared for the next device session (not run): kernels letting their dependents be scheduled as they
# start waiting (specd.pe) and the paired matvec at 72 registers with and without the plan following the
# 5-8-column kernel's residency (specd.r72, specd.r72m), against this tree, alternating:
#  1. gpu_check.pe --attn-only, --no-matmul, --spec (the early trigger changes scheduling only: every
#     model check, decode == verify, lossless speculation);
#  2. bench_against 2 (target at context 64 and 4200, verify 1 / 7 at 64, 1 / 4 / 7 at 4200, the draft)
#     and bench_multi 1 (batch 6 / 8, six sequences' verify 4 at 1024, verify 6 at 4200);
#  3. on an H200, issue 11's side-by-side table with this tree (round 24's was on an H100).
# Pack: bash docs/runs/round24/next-pack-d.sh (and tests/gpu/pack_peer.sh for .peer), then
#   run(command="bash docs/runs/round24/next-callD.sh", carry=[".devpackR", ".peer"])
set -u
export DEVPACK=.devpackR/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
GPU_CHECK=gpu_check.pe gpu_checks --attn-only --no-matmul --spec
wait $mkpid
CTX64_VERIFY=1,7 bench_against 2 specd specd.pe specd.r72 specd.r72m
before 400 multi && bench_multi 1 specd specd.pe specd.r72 specd.r72m
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && before 420 peer_bench &&
  peer_table "this tree's specd, H200"
stamp done
bundle_out
