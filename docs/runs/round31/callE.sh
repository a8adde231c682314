#!/usr/bin/env bash
# Round 31 call E: a wide block taking several of the plan's parts (pp, exp-wide-ppb.patch) against the tree.
#   run(command="bash docs/runs/round31/callE.sh", carry=[".devpackE31"])   (pack-e.sh builds it)
set -u
export DEVPACK=.devpackE31/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M6" > /dev/null 2>&1 & mk=$!
for v in tree model 1 2 3 8; do
  b=gpu_check.pp
  case $v in tree) b=gpu_check ;; model) ;; *) export SPECD_EXP_PPB=$v ;; esac
  stamp "$b --bench-matvec (Q4_K), parts a block: $v"
  timeout 30 "$C/bin/$b" --bench-matvec 2>&1 | grep -E "Q4_K (25600|5120x|8192)" | sed -E 's/  n=(1|2|4|7|8|9|16) [^u]*us//g'
  unset SPECD_EXP_PPB
done
wait $mk
bench_verify6 2 specd specd.pp
GPU_CHECK=gpu_check.pp CHECK_TIMEOUT=45 CHECK_TYPES=Q4_K,Q6_K,Q5_K gpu_checks --matmul-only
GPU_CHECK=gpu_check.pp CHECK_TIMEOUT=30 gpu_checks --no-matmul
stamp done
bundle_out
