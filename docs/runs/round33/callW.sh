#!/usr/bin/env bash
# Round 33 call W: round 32's wgmma prototype of the prompt GEMM (proto_wgmma.cu), one descriptor reading a
# process (round 32's run tried both in one and died of an illegal address): the check against float64 on
# 512 x 1024 at n = 128, then 25600 x 5120 at n = 128 / 256 / 512 (the product's mma.sync kernel: 154 us at
# 128 on an H100, round 32 call R).
#   pack: nvcc -O3 -std=c++20 -gencode arch=compute_90a,code=sm_90a -I. -o .devpackW33/proto_wgmma \
#           docs/runs/round32/proto_wgmma.cu && xz -9 .devpackW33/proto_wgmma
#   run(command="bash docs/runs/round33/callW.sh", carry=[".devpackW33"])
set -u
O=${OUT:-/tmp/device_out}
mkdir -p "$O"
exec > >(tee "$O/stdout.txt") 2>&1
nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null
xz -dc .devpackW33/proto_wgmma.xz > /tmp/proto_wgmma && chmod +x /tmp/proto_wgmma
timeout 100 /tmp/proto_wgmma 0
[ $? = 2 ] && timeout 100 /tmp/proto_wgmma 1
exit 0
