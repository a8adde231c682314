#!/usr/bin/env bash
# round 10 call A (one-off): 32-column matvec correctness (gpu_check --quick), six-sequence verify passes,
# pipelined verify through the services (one stream, k=4, on vs off)
set -u
O=/tmp/r10a; mkdir -p $O; R=${OUT:-/tmp/r10a_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
[ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
[ -d .gpu_carry ] || tar -xJf .devpack/gpucarry.tar.xz
OUT=$O/round RESIDUAL_GAIN=0.05 bash tests/gpu/device_round.sh pair27 > $O/round.log 2>&1 &
pair=$!
stamp "gpu_check --quick"
(LD_LIBRARY_PATH="$(pwd)/.gpu_carry/lib:/usr/local/cuda/lib64" timeout 200 .gpu_carry/bin/gpu_check --quick > $O/check.log 2>&1; echo "check rc=$?")
grep -E "^FAIL|SUMMARY|checks|n=1\.\.40|bit for bit" $O/check.log | head -30
wait $pair
M=/tmp/peer_models/qwen3-27b-g0.05-Q4_K_S-d6-Q4_K_M; T=$M/target.gguf
export TARGET=$M/target.gguf DRAFT=$M/draft.gguf
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
stamp "bench: six-sequence verify passes"
timeout 90 $C/bin/specd bench --backend cuda --model $T --ctx 1100 --prefill 128 --batches 1,6 --verify-k 1,3,4,5,7 \
  --verify-seqs 6 --reps 5 > $O/bench6.txt 2>&1
sed -n '/^decode/,$p' $O/bench6.txt
for p in false true; do
  stamp "one stream k=4, pipeline-verify=$p"
  OUT=$O/s1k4_$p STREAMS=1 REQUESTS=4 TOKENS=256 SPEC_FLAGS="--k 4 --no-adaptive" COORD_FLAGS="--pipeline-verify=$p" \
    timeout 120 bash tests/gpu/batch_spec.sh 2>&1 | tail -n 9
  grep -h "^step time" $O/s1k4_$p/on.stats.txt
  grep -h "ms_per_step" $O/s1k4_$p/on.coord.log | tail -n 3
done
stamp done
tar -czf $R/r10a.tgz -C $O .
