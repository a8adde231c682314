#!/usr/bin/env bash
# Prepared for the next device session (not run): the paired matvec's ring depth (next-pack-ring.sh).
#  1. gpu_check.p6 --matmul-only (the kernel == mmv::Emulate under its own plan, every type, n = 1..40);
#  2. bench_against 2 over this tree and specd.p3 / p6 / p8: the 27B-class target at context 64 and 4200,
#     the 6-layer draft (decode is where the paired kernel runs);
#  3. the decode at context 64 with 64-position attention splits against 128 (runtime flag);
#  4. each small launch's cost on the step (specd.abl, SPECD_ABLATE: round 14's ablation hook);
#  5. ncu --set full of one decode layer's matvecs of the p6 build (call R has this tree's), if the call
#     is young enough.
# Pack: bash docs/runs/round23/next-pack-ring.sh, then
#   run(command="bash docs/runs/round23/next-callRing.sh", carry=[".devpackY"], kind="nvidia-h200")
set -u
export DEVPACK=.devpackY/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
CHECK_TIMEOUT=300 GPU_CHECK=gpu_check.p6 gpu_checks --matmul-only
wait $mkpid
CTX64_VERIFY=1 bench_against 2 specd specd.p3 specd.p6 specd.p8
# The decode's attention at context 64 with 64-position splits (2 warps, half the shared memory) against
# 128 (is its idle time the block's size?), alternating.
if before 380 split64; then
  for sp in 128 64 128 64; do
    stamp "specd: context 64, --cuda-attn-split $sp"
    bench_row specd --ctx 64 --prefill 16 --batches 1 --verify-k 1 --cuda-attn-split "$sp"
  done
fi
# What each small launch costs on the step's critical path today (round 14 measured it on its kernels):
# specd.abl with SPECD_ABLATE naming the ops to skip (outputs are garbage; the timing is the point).
if before 330 ablate; then
  for what in none attention rmsnorm rope swiglu none; do
    stamp "specd.abl, SPECD_ABLATE=$what: context 64 and 4200, decode"
    SPECD_ABLATE=$what bench_row specd.abl --ctx 64 --prefill 16 --batches 1 --verify-k 1
    SPECD_ABLATE=$what bench_row specd.abl --ctx 4200 --prefill 4096 --batches 1 --verify-k 1
  done
fi
before 420 ncu && GPU_CHECK=gpu_check.p6 ncu_full mmvdec_p6 MmvKernel 40 4 1 1 64 f16
stamp done
bundle_out
