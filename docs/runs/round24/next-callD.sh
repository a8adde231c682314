#!/usr/bin/env bash
# Prepared for the next device session (not run): against this tree, alternating,
#   specd.pe   kernels letting their dependents be scheduled as they start waiting (next-pdl-cap.patch),
#   specd.pt   the plan's parts, two a warp in the 5-8- and 9-16-column kernels where their own
#              residency would leave a partial second wave (next-mmv-parts.patch),
#   specd.r72m the paired matvec at 72 registers, the plan following the smaller of the paired and
#              5-8-column residencies (next-pdl-cap.patch; specd.r72 without that is packed too).
#  1. gpu_check.pt --matmul-only with SPECD_MMV_PPW=2 (every 5-16-column launch at two parts a warp: the
#     kernels == mmv::Emulate bit for bit) and --spec; gpu_check.pe --attn-only, --no-matmul, --spec (the
#     early trigger changes scheduling only);
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
SPECD_MMV_PPW=2 CHECK_TIMEOUT=170 GPU_CHECK=gpu_check.pt gpu_checks --matmul-only
GPU_CHECK=gpu_check.pt gpu_checks --spec
GPU_CHECK=gpu_check.pe gpu_checks --attn-only --no-matmul --spec
wait $mkpid
CTX64_VERIFY=1,7 bench_against 2 specd specd.pe specd.pt specd.r72m
before 400 multi && bench_multi 1 specd specd.pe specd.pt specd.r72m
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && before 420 peer_bench &&
  peer_table "this tree's specd, H200"
stamp done
bundle_out
