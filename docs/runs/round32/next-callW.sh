#!/usr/bin/env bash
# Prepared for the next device session (not run): the wgmma prototype of the prompt GEMM (proto_wgmma.cu),
# checked against float64 with both descriptor layouts, then timed on the gate shape at 128 / 256 / 512
# columns (the product's mma.sync kernel: 154 us at 128 on an H100, round 32 call R).
#   run(command="bash docs/runs/round32/next-callW.sh", carry=[".devpackW32"])
# .devpackW32/proto_wgmma, built here: nvcc -O3 -std=c++20 -gencode arch=compute_90a,code=sm_90a -I. \
#   -o .devpackW32/proto_wgmma docs/runs/round32/proto_wgmma.cu
set -u
nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null
timeout 200 .devpackW32/proto_wgmma 2>&1
