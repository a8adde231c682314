#!/usr/bin/env bash
# Round 32 call R: the prompt GEMM with its copies walking pointers and its MMAs ordered 16 apart (call Q's
# ncu: 241 us for the 25600 x 5120 gate at 128 columns, 42% of the stall samples "wait", 2550 instructions a
# warp and group); checked and measured against cuBLAS on F16 tiles.
#   run(command="bash docs/runs/round32/callR.sh", carry=[".devpackR32"])
# .devpackR32: BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd gpu_check" tests/gpu/make_carry.sh, then
#   XZ_OPT=-6 tar -cJf .devpackR32/devcarry.tar.xz .devcarry
set -u
export DEVPACK=.devpackR32/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M6" > /dev/null 2>&1 & mk=$!
CHECK_TIMEOUT=60 CHECK_TYPES=Q4_K,Q5_K,Q6_K gpu_checks --matmul-only
wait $mk
for t in 128 512 256; do
  stamp "prefill $t, qgemm max 512 / 0"
  prefill_qg specd $t 512; prefill_qg specd $t 0
done
before 150 "ncu" && ncu_full_of qg QGemmKernel 4 1 "$C/bin/specd" bench --backend cuda --model "$M6/target.gguf" \
  --ctx 192 --prefill 128 --batches 1 --verify-k 1 --reps 1
CHECK_TIMEOUT=45 gpu_checks --no-matmul
stamp done
bundle_out
