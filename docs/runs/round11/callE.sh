#!/usr/bin/env bash
# round 11 call E (one-off): block tables cover at least 1024 tokens (graph keys that survive a growing
# context): gpu_check --quick, the ~80% pair side by side (fresh generates: k = 4, 7, adaptive; graph
# figures), decode at context 64 (the empty splits' cost)
set -u
O=/tmp/r11e; mkdir -p $O; R=${OUT:-/tmp/r11e_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
[ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
stamp "gpu_check --quick"
timeout 150 $C/bin/gpu_check --quick > $O/check.log 2>&1; echo "check rc=$?"
grep -E "^FAIL|SUMMARY|attention" $O/check.log | head -12
stamp "peer_bench (speculative rows, ~80% pair)"
OUT=$O/peer RESIDUAL_GAIN=0.05 SPEC_ONLY=1 SPEC_NS="4 7" PEER_BUDGET_S=170 timeout 180 bash tests/gpu/peer_bench.sh 2>&1 | grep -E "speculative|acceptance|done"
grep -h "tok/s\|steps by\|graph" $O/peer/specd.log | tail -n 16
M=/tmp/peer_models/qwen3-27b-g0.05-Q4_K_S-d6-Q4_K_M
stamp "decode at context 64 and 4096"
timeout 60 $C/bin/specd bench --backend cuda --model $M/target.gguf --ctx 64 --prefill 16 --batches 1 --verify-k 1,3,7 --reps 5 > $O/bench64.txt 2>&1
sed -n '/^decode/,$p' $O/bench64.txt
stamp done
tar -czf $R/r11e.tgz -C $O .
