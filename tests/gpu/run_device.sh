#!/usr/bin/env bash
# One device-tool call: checks and/or benchmarks of the CUDA backend on the
# lent GPU. Uses the binary carried in .gpu_carry/bin (built here with
# tests/gpu/standalone, -DCMAKE_CUDA_ARCHITECTURES=90) and the abseil shared
# libraries carried with it; if that binary cannot start there, builds from
# source on the device with the carried abseil headers.
#   tests/gpu/run_device.sh [check|quick|bench|all]   (logs under $OUT)
set -u
mode=${1:-all}
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
root=$(pwd)
export LD_LIBRARY_PATH="$root/.gpu_carry/lib:$root/.gpu_carry/absl/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit \
  --format=csv 2>&1 | tee "$OUT/gpu.txt"
bin="$root/.gpu_carry/bin/gpu_check"
if ! "$bin" --probe >/dev/null 2>"$OUT/probe.err"; then
  echo "carried binary does not start:"; head -5 "$OUT/probe.err"
  echo "building on the device"
  cmake -S tests/gpu/standalone -B /tmp/build-gpu -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DSPECD_ABSL_ROOT="$root/.gpu_carry/absl" > "$OUT/build.log" 2>&1 &&
    ninja -C /tmp/build-gpu -j16 gpu_check >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  bin=/tmp/build-gpu/gpu_check
fi
rc=0
if [ "$mode" = check ] || [ "$mode" = all ] || [ "$mode" = quick ]; then
  flag=""; [ "$mode" = quick ] && flag=--quick
  timeout 330 "$bin" $flag > "$OUT/check.log" 2>&1; rc=$?
  echo "== check rc=$rc"; grep -E "^(FAIL|SKIP|device:|SUMMARY)|error|Error" "$OUT/check.log" | head -60
fi
if [ "$mode" = bench ] || [ "$mode" = all ]; then
  timeout 240 "$bin" --bench > "$OUT/bench.log" 2>&1; brc=$?
  echo "== bench rc=$brc"; grep -E "^(BENCH|  |FAIL|SUMMARY)|rror" "$OUT/bench.log" | head -80
  [ $rc -eq 0 ] && rc=$brc
fi
if [ "$mode" = profile ] || [ "$mode" = all ]; then
  ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ -n "$ncu_bin" ]; then
    timeout 120 "$ncu_bin" --clock-control none --kernel-name regex:MmqKernel --launch-skip 1 --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
      --section MemoryWorkloadAnalysis --section LaunchStats \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" "$bin" --profile > "$OUT/ncu_mmq.txt" 2>&1
    echo "== ncu rc=$?"
    grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Theoretical Occupancy|Block Limit|Registers Per|Warp Cycles Per Issued|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|L2 Hit|L1/TEX Hit|Dynamic Shared|Stall" "$OUT/ncu_mmq.txt" | head -30
    grep -E "issue_stalled" "$OUT/ncu_mmq.txt" | awk '$NF+0 > 0.05' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | head -25
  else
    echo "== ncu not found"
  fi
fi
exit $rc
