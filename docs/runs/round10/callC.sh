#!/usr/bin/env bash
# round 10 call C (one-off): where a matvec column tile's time goes (ncu on MmvKernel at 1 and 2 column
# tiles), attention in a six-sequence verify, and verify passes at a short context
set -u
O=/tmp/r10c; mkdir -p $O; R=${OUT:-/tmp/r10c_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
[ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
M=/tmp/peer_models/qwen3-27b-g0.05-Q4_K_S-d6-Q4_K_M
[ -f $M/target.gguf ] || OUT=$O/round RESIDUAL_GAIN=0.05 bash tests/gpu/device_round.sh pair27 > $O/round.log 2>&1
export TARGET=$M/target.gguf DRAFT=$M/draft.gguf
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
stamp "bench: six-sequence verify passes at context 128"
timeout 90 $C/bin/specd bench --backend cuda --model $TARGET --ctx 128 --prefill 16 --batches 1,6 --verify-k 1,4 \
  --verify-seqs 6 --reps 5 > $O/bench6_ctx128.txt 2>&1
sed -n '/^decode/,$p' $O/bench6_ctx128.txt
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
SECS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats"
KEY="MmvKernel|Duration|Throughput|Hit Rate|Achieved Occupancy|Registers Per|Executed Ipc|Warp Cycles Per|Block Size|Grid Size|Eligible|Issued Warp|Theoretical Occ"
stamp "ncu: MmvKernel, one column tile (batch-1 decode)"
timeout 120 $NCU --clock-control none --kernel-name-base demangled -k 'regex:MmvKernel<.*\(int\)1>' --launch-skip 300 --launch-count 4 $SECS \
  $C/bin/specd bench --backend cuda --model $TARGET --ctx 1100 --prefill 16 --batches 1 --verify-k 1 --reps 1 > $O/ncu_nt1.txt 2>&1
echo "rc=$?"; grep -E "$KEY" $O/ncu_nt1.txt | head -60
stamp "ncu: MmvKernel, two column tiles (six sequences, k=1)"
timeout 100 $NCU --clock-control none --kernel-name-base demangled -k 'regex:MmvKernel<.*\(int\)2>' --launch-count 4 $SECS \
  $C/bin/specd bench --backend cuda --model $TARGET --ctx 1100 --prefill 1 --batches 6 --verify-k 1 --verify-seqs 6 --reps 1 > $O/ncu_nt2.txt 2>&1
echo "rc=$?"; grep -E "$KEY" $O/ncu_nt2.txt | head -60
stamp "ncu: attention (six sequences, context 1100)"
timeout 100 $NCU --clock-control none --kernel-name-base demangled -k 'regex:Attn' --launch-skip 700 --launch-count 6 \
  --section SpeedOfLight --section LaunchStats \
  $C/bin/specd bench --backend cuda --model $TARGET --ctx 1100 --prefill 1 --batches 6 --verify-k 4 --verify-seqs 6 --reps 1 > $O/ncu_attn.txt 2>&1
echo "rc=$?"; grep -E "Attn|Duration|Grid Size|Block Size|Throughput" $O/ncu_attn.txt | head -60
stamp done
tar -czf $R/r10c.tgz -C $O .
