#!/usr/bin/env bash
# Round 30 call N: ncu counts of one 30-column launch on Q4_K 25600 x 5120: today's wide kernel (gpu_check
# --bench-matvec's first n = 30 launch: 216 launches of n = 24 before it) against the lean int8 prototype
# (proto_f16mma.cu's ProtoKernel<4, 4, 2, kI8Imad>: the same integer arithmetic).
#   run(command="bash docs/runs/round30/callN.sh", carry=[".devpackV2", ".devpackF"])
set -u
export DEVPACK=.devpackV2/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)
m=gpu__time_duration.sum,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,smsp__inst_executed_pipe_tensor.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,smsp__average_warp_latency_issue_stalled_barrier,smsp__issue_active.avg.pct_of_peak_sustained_active
[ "${SKIP_OURS:-0}" = 1 ] || {
stamp "ncu: today's wide kernel, n = 30"
timeout 120 "$ncu" --clock-control none --kernel-name-base demangled --kernel-name 'regex:MmvKernelWide<\(specd::GgmlType\)12>' \
  --launch-skip 216 --launch-count 1 --metrics "$m" --csv --print-units base "$C/bin/gpu_check" --bench-matvec 2>&1 |
  grep -E '^"' | awk -F'","' '{print $(NF-2), $NF}'
}
stamp "ncu: the lean int8 prototype, n = 30 (2 parts of the groups, 4 warps a block)"
# (the 9th configuration of the gate/up runs: 8 x 56 launches before it, then its check launch)
timeout 120 "$ncu" --clock-control none --kernel-name regex:ProtoKernel \
  --launch-skip 449 --launch-count 1 --metrics "$m" --csv --print-units base .devpackF/proto_f16mma 2>&1 |
  grep -E '^"' | awk -F'","' '{print $(NF-2), $NF}'
stamp done
