#!/usr/bin/env bash
# round 11 call D (one-off): gpu_check --quick on the final build; ncu of the matvec at 1 column (paired)
# and 8 columns (one tile: verify k=7), decode at context 1100
set -u
O=/tmp/r11d; mkdir -p $O; R=${OUT:-/tmp/r11d_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
[ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
M=/tmp/peer_models/qwen3-27b-Q4_K_S-d6-Q4_K_M; T=$M/target.gguf
mkdir -p $M
[ -f $T ] || timeout 200 $C/bin/specd make-model --preset qwen3-27b --type Q4_K_S --fill blocks --sync=false --pair \
  --draft-layers 6 --draft-type Q4_K_M --out $M > $O/make.log 2>&1 &
mk=$!
stamp "gpu_check --quick"
timeout 200 $C/bin/gpu_check --quick > $O/check.log 2>&1; echo "check rc=$?"
grep -E "^FAIL|SUMMARY|n = 1, 3, 5" $O/check.log | head -8
wait $mk; stamp "model: $(ls -la $T 2>&1 | awk '{print $5}') bytes"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
SECS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats"
KEY="MmvKernel|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Executed Ipc|Warp Cycles Per|Block Size|Grid Size|Eligible|Issued Warp|Theoretical Occ|Dynamic Shared"
stamp "ncu: paired (decode)"
timeout 120 $NCU --clock-control none --kernel-name-base demangled -k 'regex:MmvKernel<.*\(int\)0>' --launch-skip 300 --launch-count 6 $SECS \
  $C/bin/specd bench --backend cuda --model $T --ctx 1100 --prefill 16 --batches 1 --verify-k 1 --reps 1 > $O/ncu_paired.txt 2>&1
echo "rc=$?"; grep -E "$KEY" $O/ncu_paired.txt | head -80
stamp "ncu: one tile (verify k=7)"
timeout 120 $NCU --clock-control none --kernel-name-base demangled -k 'regex:MmvKernel<.*\(int\)1>' --launch-skip 100 --launch-count 4 $SECS \
  $C/bin/specd bench --backend cuda --model $T --ctx 1100 --prefill 16 --batches 1 --verify-k 7 --reps 1 > $O/ncu_tile1.txt 2>&1
echo "rc=$?"; grep -E "$KEY" $O/ncu_tile1.txt | head -60
stamp done
tar -czf $R/r11d.tgz -C $O .
