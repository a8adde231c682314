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
exit $rc
