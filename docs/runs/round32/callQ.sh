#!/usr/bin/env bash
# Round 32 call Q: the quantized prompt GEMM (k_qgemm.cu) checked and measured, and round 31's wide-kernel
# alignment (al, next-wide-align.patch) measured, in one call.
#   run(command="bash docs/runs/round32/callQ.sh", carry=[".devpackQ32"])
# .devpackQ32: tests/gpu/pack_variants.sh .devpackQ32 docs/runs/round31/next-wide-align.patch \
#   common/backend/cuda/k_matvec.cu al::+gpu_check   (this tree's specd / gpu_check, and .al builds)
#  1. gpu_check --matmul-only of Q4_K, Q5_K, Q6_K: the prompt GEMM (n = 65, 100) and cuBLAS against the CPU;
#  2. prefill of 128, 512 and 256 tokens on the 27B-class target, --cuda-qgemm-max-tokens 512 against 0
#     (cuBLAS on F16 tiles), alternating;
#  3. gpu_check --no-matmul (models: the 80-token prefill against single steps, now through the GEMM);
#  4. al: --bench-matvec Q4_K lines, tree / al; six sequences' verify (bench_verify6);
#  5. gpu_check.al --matmul-only of Q4_K (bit for bit).
# (Trimmed to ~320 s: failed starts had left ~870 s of the session's device time.)
set -u
export DEVPACK=.devpackQ32/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M6" > /dev/null 2>&1 & mk=$!
CHECK_TIMEOUT=90 CHECK_TYPES=Q4_K,Q5_K,Q6_K gpu_checks --matmul-only
wait $mk
for t in 128 512 256; do
  stamp "prefill $t, qgemm max 512 / 0"
  prefill_qg specd $t 512; prefill_qg specd $t 0
done
CHECK_TIMEOUT=45 gpu_checks --no-matmul
for b in gpu_check gpu_check.al; do
  stamp "$b --bench-matvec (Q4_K)"
  timeout 30 "$C/bin/$b" --bench-matvec 2>&1 | grep -E "Q4_K"
done
before 330 "bench_verify6" && bench_verify6 1 specd specd.al
before 400 "gpu_check.al" && GPU_CHECK=gpu_check.al CHECK_TIMEOUT=40 CHECK_TYPES=Q4_K gpu_checks --matmul-only
stamp done
bundle_out
