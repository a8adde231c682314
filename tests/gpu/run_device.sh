#!/usr/bin/env bash
# One device-tool call: checks and/or benchmarks of the CUDA backend on the
# lent GPU. Uses the binary carried in .gpu_carry/bin (built here with
# tests/gpu/standalone, -DCMAKE_CUDA_ARCHITECTURES=90) and the abseil shared
# libraries carried with it; if that binary cannot start there, builds from
# source on the device with the carried abseil headers.
#   tests/gpu/run_device.sh [check|quick|bench|profile|all|full|min]   (logs under $OUT)
#   all = check + bench; full = all + ncu of the matvec and attention kernels;
#   min = quick check + a short benchmark.
# Time limits (seconds) per stage: CHECK_S (default 200), BENCH_S (default 200).
set -u
mode=${1:-all}
OUT=${OUT:-/tmp/gpu_out}
CHECK_S=${CHECK_S:-200}
BENCH_S=${BENCH_S:-200}
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
t0=$(date +%s)
if [ "$mode" = check ] || [ "$mode" = all ] || [ "$mode" = full ] || [ "$mode" = quick ]; then
  flag=""; [ "$mode" = quick ] && flag=--quick
  timeout "$CHECK_S" "$bin" $flag > "$OUT/check.log" 2>&1; rc=$?
  echo "== check rc=$rc ($(( $(date +%s) - t0 )) s)"
  grep -E "^(FAIL|SKIP|device:|SUMMARY)|error|Error" "$OUT/check.log" | head -40
fi
if [ "$mode" = bench ] || [ "$mode" = all ] || [ "$mode" = full ]; then
  t1=$(date +%s)
  timeout "$BENCH_S" "$bin" --bench > "$OUT/bench.log" 2>&1; brc=$?
  echo "== bench rc=$brc ($(( $(date +%s) - t1 )) s)"
  grep -E "^(BENCH|  |FAIL|SUMMARY)|rror" "$OUT/bench.log" | head -200
  [ $rc -eq 0 ] && rc=$brc
fi
if [ "$mode" = min ]; then  # quick check + short benchmark (tight device budgets)
  timeout "$CHECK_S" "$bin" --quick > "$OUT/check.log" 2>&1; rc=$?
  echo "== quick check rc=$rc ($(( $(date +%s) - t0 )) s)"
  grep -E "^(FAIL|SKIP|device:|SUMMARY)|error|Error" "$OUT/check.log" | head -40
  t1=$(date +%s)
  timeout "$BENCH_S" "$bin" --bench-min > "$OUT/bench.log" 2>&1; brc=$?
  echo "== bench-min rc=$brc ($(( $(date +%s) - t1 )) s)"
  grep -E "^(BENCH|  |FAIL|SUMMARY)|rror" "$OUT/bench.log" | head -120
  [ $rc -eq 0 ] && rc=$brc
fi
if [ "$mode" = profile ] || [ "$mode" = full ]; then
  ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ -n "$ncu_bin" ]; then
    timeout ${NCU_S:-60} "$ncu_bin" --clock-control none --kernel-name regex:Mv2Kernel --launch-skip 1 --launch-count 2 \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
      --section MemoryWorkloadAnalysis --section LaunchStats \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" "$bin" --profile > "$OUT/ncu_mv2.txt" 2>&1
    echo "== ncu rc=$?"
    grep -E "Mv2Kernel|Duration|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Theoretical Occupancy|Registers Per|Issued Warp|No Eligible|L2 Hit" "$OUT/ncu_mv2.txt" | head -30
    grep -E "issue_stalled" "$OUT/ncu_mv2.txt" | awk '$NF+0 > 0.1' | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | head -24
    timeout ${NCU2_S:-40} "$ncu_bin" --clock-control none --kernel-name regex:"Attn|KvWrite" --metrics gpu__time_duration.sum \
      "$bin" --profile-attn > "$OUT/ncu_attn.txt" 2>&1
    echo "== ncu attention rc=$? (v1 then v2; each: warm-up, 1 query, 7 queries)"
    grep -E "profile-attn|Attn|KvWrite|gpu__time_duration" "$OUT/ncu_attn.txt" | sed 's/(int, int, int)//' | awk '{$1=$1; print}' | cut -c1-110 | head -60
  else
    echo "== ncu not found"
  fi
fi
echo "== total $(( $(date +%s) - t0 )) s"
exit $rc
