#!/usr/bin/env bash
# Prepared for the next device session (not run): why 4-warp wide blocks lose 25% in the product (calls B's
# lwp4, R30's lwn4) when they are the lean prototype's best. ncu --set full of one 30-column launch on Q4_K
# 25600 x 5120 (216 wide launches before it in --bench-matvec) of lwc (the landed wide kernel, 8-warp blocks,
# two an SM) and of lwp4 (packed stage, 4-warp blocks, four an SM), their stall samples by SASS region, then
# the occupancy and memory sections side by side.
#   run(command="bash docs/runs/round31/next-callF.sh", carry=[".devpackB31"])   (pack-b.sh builds it on
#   7bace52, its lwc and lwp4 from the round's patches)
set -u
export DEVPACK=.devpackB31/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
ncu_full_of lwc30 MmvKernelWide 216 1 "$C/bin/gpu_check.lwc" --bench-matvec
ncu_full_of lwp4_30 MmvKernelWide 216 1 "$C/bin/gpu_check.lwp4" --bench-matvec
for t in lwc30 lwp4_30; do
  stamp "$t: occupancy, memory"
  xz -dc "$O/${t}_details.txt.xz" | grep -E "Achieved Occupancy|Theoretical Occupancy|Block Limit|Waves Per SM|L2 Hit|Memory Throughput|DRAM Throughput|L1/TEX Hit|Mem Busy|Max Bandwidth|Issue Slots Busy|No Eligible" | head -24
done
stamp done
bundle_out
