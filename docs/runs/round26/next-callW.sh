#!/usr/bin/env bash
# Prepared for the next device session (not run): the wide matvec (next-mmv-wide.patch) against this tree.
# Round 19's ncu: the 16-column kernel waits on its activation loads half its time (each block reads a
# group's records, ~2.4x the weight record's bytes an 8-column tile, from L2 at 25% occupancy); the
# six-sequence verify of 30 columns runs two passes of ~1.6x a decode each, the bound of issue 12's six
# streams. The wide kernel reads each group's records once a block of up to 8 tiles from shared memory
# and takes 17-64 columns in one pass.
#  1. gpu_check.w --matmul-only (every type: kernel == host emulation bit for bit for n = 1..64, each
#     column the same whatever n), --spec, --no-matmul (models: verify == decode, six sequences);
#  2. --bench-matvec with gpu_check and gpu_check.w: weight GB/s at n = 1..64 (the tree: n <= 16);
#  3. bench_multi 1 (batch 6/8 decode, six sequences' verify 4 at 1024 = 30 columns, verify 6 at 4200)
#     with specd, .w, .w9, .w5 (the wide kernel from 5 columns), .w4, .s3;
#  4. bench_q8_prefill (prefill 512 and 128) with specd, .w, .p128, .p512;
#  5. if time is left: gpu_check.w9 --matmul-only (the wide kernel at 9-16 columns, bit for bit), ncu of
#     the six-sequence verify (6 x 5 tokens at 1024) with gpu_check and gpu_check.w (per-kernel time).
# Pack: bash docs/runs/round26/next-pack-w.sh, then
#   run(command="bash docs/runs/round26/next-callW.sh", carry=[".devpackW"])
set -u
export DEVPACK=.devpackW/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
GPU_CHECK=gpu_check.w gpu_checks --matmul-only --spec --no-matmul
for b in gpu_check gpu_check.w; do
  stamp "$b --bench-matvec"
  timeout 90 "$C/bin/$b" --bench-matvec 2>&1 | grep -E "BENCH|n=" | tee "$O/bench_matvec_$(variant "$b").txt"
done
wait $mkpid
bench_multi 1 specd specd.w specd.w9 specd.w5 specd.w4 specd.s3
before 480 prefill && bench_q8_prefill specd specd.w specd.p128 specd.p512
before 470 "gpu_check.w9" && CHECK_TIMEOUT=110 GPU_CHECK=gpu_check.w9 gpu_checks --matmul-only
before 520 ncu && ncu_step 6 5 1024 f16 && GPU_CHECK=gpu_check.w ncu_step 6 5 1024 f16
stamp done
bundle_out
