#!/usr/bin/env bash
# Round 31 call D: wide blocks of up to 16 warps (w16) against the tree.
#   run(command="bash docs/runs/round31/callD.sh", carry=[".devpackD31"])   (pack-d.sh builds it)
set -u
export DEVPACK=.devpackD31/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M6" > /dev/null 2>&1 & mk=$!
for b in gpu_check gpu_check.w16 gpu_check gpu_check.w16; do
  stamp "$b --bench-matvec (Q4_K)"
  timeout 30 "$C/bin/$b" --bench-matvec 2>&1 | grep -E "Q4_K"
done
wait $mk
bench_verify6 2 specd specd.w16
GPU_CHECK=gpu_check.w16 CHECK_TIMEOUT=40 CHECK_TYPES=Q4_K,Q6_K gpu_checks --matmul-only
stamp done
bundle_out
