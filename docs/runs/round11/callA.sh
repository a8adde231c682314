#!/usr/bin/env bash
# round 11 call A (one-off): the matvec streamed through shared memory + paired levels:
# gpu_check --quick, the side-by-side table (peer_bench), the round-10 binary on the same files
set -u
O=/tmp/r11a; mkdir -p $O; R=${OUT:-/tmp/r11a_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
[ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
[ -x .devcarry/bin/specd.base ] || tar -xJf .devpack/base.tar.xz
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
stamp "gpu_check --quick"
timeout 200 $C/bin/gpu_check --quick > $O/check.log 2>&1; echo "check rc=$?"
grep -E "^FAIL|SUMMARY|checks|bit for bit" $O/check.log | head -30
stamp "peer_bench (new build)"
OUT=$O/peer SPEC_NS="3 4 6" PEER_BUDGET_S=300 timeout 320 bash tests/gpu/peer_bench.sh 2>&1 | tail -n 40
M=/tmp/peer_models/qwen3-27b-Q4_K_S-d6-Q4_K_M; T=$M/target.gguf
for b in specd.base specd; do
  stamp "$b: decode ctx 64 / 4096, verify k 1..7"
  timeout 60 $C/bin/$b bench --backend cuda --model $T --ctx 4200 --prefill 4096 --batches 1,6 --verify-k 1,3,4,7 --reps 5 > $O/$b.depth.txt 2>&1
  sed -n '/^decode/,$p' $O/$b.depth.txt
  timeout 40 $C/bin/$b bench --backend cuda --model $T --ctx 64 --prefill 16 --batches 1 --verify-k 1 --reps 5 > $O/$b.ctx64.txt 2>&1
  sed -n '/^decode/,/^$/p' $O/$b.ctx64.txt
  timeout 60 $C/bin/$b bench --backend cuda --model $T --ctx 1100 --prefill 128 --batches 1,6 --verify-k 1,4 --verify-seqs 6 --reps 5 > $O/$b.seqs6.txt 2>&1
  sed -n '/^verify/,$p' $O/$b.seqs6.txt
done
stamp done
tar -czf $R/r11a.tgz -C $O .
