#!/usr/bin/env bash
# Prepared for the next device session (not run): the prompt GEMM's variants (exp-qgemm.patch) against the tree.
#   run(command="bash docs/runs/round32/next-callS.sh", carry=[".devpackS32"])   (next-pack-s.sh builds it)
#  1. each variant's gpu_check --matmul-only of Q4_K, Q5_K, Q6_K (the prompt GEMM against the CPU);
#  2. prefill of 128 / 256 / 512 tokens on the 27B-class target with the tree, w8, hf, w8hf, alternating, twice
#     (--cuda-qgemm-max-tokens 512 so that 512 runs the GEMM too), and the tree with 0 (the slab and cuBLAS);
#  3. ncu --set full of the fastest variant's gate launch at 128 columns (NCU_V, default hf).
set -u
export DEVPACK=.devpackS32/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M6" > /dev/null 2>&1 & mk=$!
for v in w8 hf w8hf; do GPU_CHECK=gpu_check.$v CHECK_TIMEOUT=40 CHECK_TYPES=Q4_K,Q5_K,Q6_K gpu_checks --matmul-only; done
wait $mk
for rep in 1 2; do
  for t in 128 256 512; do
    stamp "prefill $t (rep $rep)"
    for b in specd specd.w8 specd.hf specd.w8hf; do prefill_qg $b $t 512; done
    prefill_qg specd $t 0
  done
done
before 400 "ncu" && ncu_full_of qg QGemmKernel 4 1 "$C/bin/specd.${NCU_V:-hf}" bench --backend cuda \
  --model "$M6/target.gguf" --ctx 192 --prefill 128 --batches 1 --verify-k 1 --reps 1
stamp done
bundle_out
