#!/usr/bin/env bash
# round 10 call B (one-off): six streams (one-pass 32-column verifies, pipelined verify on/off),
# one stream adaptive and sampled with pipelining
set -u
O=/tmp/r10b; mkdir -p $O; R=${OUT:-/tmp/r10b_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
[ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
M=/tmp/peer_models/qwen3-27b-g0.05-Q4_K_S-d6-Q4_K_M
[ -f $M/target.gguf ] || OUT=$O/round RESIDUAL_GAIN=0.05 bash tests/gpu/device_round.sh pair27 > $O/round.log 2>&1
export TARGET=$M/target.gguf DRAFT=$M/draft.gguf
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
SECS="--section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats"
stamp "ncu: matvec at batch 1 (one column tile) and in a six-sequence k=4 verify (four tiles)"
timeout 150 $NCU --clock-control none --kernel-name-base demangled -k 'regex:MmvKernel<.*, 1>' --launch-skip 400 --launch-count 3 $SECS \
  $C/bin/specd bench --backend cuda --model $TARGET --ctx 1100 --prefill 16 --batches 1 --verify-k 1 --reps 1 > $O/ncu_nt1.txt 2>&1
echo "ncu nt1 rc=$?"; grep -E "MmvKernel|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|L1/TEX Hit|L2 Hit|Achieved Occupancy|Registers Per|Stall|Issued Ipc" $O/ncu_nt1.txt | head -40
timeout 150 $NCU --clock-control none --kernel-name-base demangled -k 'regex:MmvKernel<.*, 4>' --launch-count 3 $SECS \
  $C/bin/specd bench --backend cuda --model $TARGET --ctx 1100 --prefill 16 --batches 1 --verify-k 4 --verify-seqs 6 --reps 1 > $O/ncu_nt4.txt 2>&1
echo "ncu nt4 rc=$?"; grep -E "MmvKernel|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|L1/TEX Hit|L2 Hit|Achieved Occupancy|Registers Per|Stall|Issued Ipc" $O/ncu_nt4.txt | head -40
for p in true; do
  stamp "six streams, 128 + 256 tokens, k=4, pipeline-verify=$p"
  OUT=$O/s6k4_$p TOKENS=256 SPEC_FLAGS="--k 4 --no-adaptive" COORD_FLAGS="--pipeline-verify=$p" \
    timeout 170 bash tests/gpu/batch_spec.sh 2>&1 | tail -n 14
  grep -h "^step time" $O/s6k4_$p/on.stats.txt
done
stamp "one stream adaptive"
OUT=$O/s1ad STREAMS=1 REQUESTS=4 TOKENS=256 timeout 120 bash tests/gpu/batch_spec.sh 2>&1 | tail -n 9
grep -h "^step time" $O/s1ad/on.stats.txt
grep -h "ms_per_step" $O/s1ad/on.coord.log | tail -n 3
stamp "one stream sampled adaptive"
OUT=$O/s1samp STREAMS=1 REQUESTS=4 TOKENS=256 SAMPLE_FLAGS="--temperature 0.7 --top-p 0.9" timeout 120 bash tests/gpu/batch_spec.sh 2>&1 | tail -n 9
grep -h "^step time" $O/s1samp/on.stats.txt
grep -h "ms_per_step" $O/s1samp/on.coord.log | tail -n 3
stamp done
tar -czf $R/r10b.tgz -C $O .
