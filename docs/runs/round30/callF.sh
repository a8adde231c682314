#!/usr/bin/env bash
# Round 30 calls F, F2 (the split variants added), F3 (parts over blocks; the down matrix): the F16-MMA prototype (proto_f16mma.cu, built here: nvcc -O3 -std=c++17 -arch=sm_90) against
# today's Q4_K matvec on the same shape (gpu_check --bench-matvec, its first line: Q4_K 25600 x 5120), one call.
#   run(command="bash docs/runs/round30/callF.sh", carry=[".devpackV2", ".devpackF"])
set -u
export DEVPACK=.devpackV2/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
stamp "prototype"
timeout 120 .devpackF/proto_f16mma 2>&1
stamp "gpu_check --bench-matvec (today's kernels)"
timeout 100 "$C/bin/gpu_check" --bench-matvec 2>&1 | grep -E "BENCH|Q4_K"
stamp done
