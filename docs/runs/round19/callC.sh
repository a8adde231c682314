#!/usr/bin/env bash
# Round 19 call C: where the multi-column verify's time goes (issue 12's six streams: a 30-token verify is
# 3.1x a six-token forward; issue 11's 7-token pass is 1.63x a decode step). ncu's per-kernel time of the
# six-stream verify forward (6 x 5 tokens at 1024) and of the 7-token pass and a decode step at 4096 (KV f16,
# as specd bench), then ncu --set full of the 27B-class gate/up and down matvecs of the six-stream forward
# (launches 5-8 of MmvKernel: gate/up 16 + 14 columns, down 16 + 14): L1/L2 hit rates and throughputs,
# issue stalls. Binaries: .devpack (round 18, 09bfc88):
#   run(command="bash docs/runs/round19/callC.sh", carry=[".devpack"])
set -u
. tests/gpu/device_lib.sh
device_setup
ncu_step 6 5 1024 f16
ncu_full mmv6x5 MmvKernel 4 4 6 5 1024 f16
for f in "$O"/mmv6x5_details.txt.xz; do
  xz -dc "$f" | grep -E "MmvKernel|Duration|L1/TEX Hit Rate|L2 Hit Rate|Memory Throughput|DRAM Throughput|L1/TEX Cache Throughput|L2 Cache Throughput|Executed Ipc Active|Issue Slots Busy|Achieved Occupancy" | head -60
done
ncu_step 1 7 4096 f16
ncu_step 1 1 4096 f16
stamp done
