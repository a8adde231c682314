#!/usr/bin/env bash
# round 13 call E: the prefill GEMMs' dequantization on a second stream (tile j + 1 dequantized while
# tile j's GEMM runs) and 512-token forwards by default: gpu_check --quick and --no-matmul, prefill rates
# for main (specd.base), call D's build (specd.d) and the new one (default and 256-token forwards), then
# six streams through the three services, k = 4, ~80% pair (round 11: 1.14x target-only)
set -u
O=/tmp/r13e; mkdir -p $O; R=${OUT:-/tmp/r13e_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
[ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
M6=/tmp/peer_models/qwen3-27b-Q4_K_S-d6-Q4_K_M; M8=/tmp/peer_models/qwen3-27b-g0.05-Q4_K_S-d6-Q4_K_M
mk() {
  local d=$1; shift
  [ -f $d/target.gguf ] && [ -f $d/draft.gguf ] ||
    timeout 120 $C/bin/specd make-model --preset qwen3-27b --type Q4_K_S --fill blocks --sync=false --pair \
      --draft-layers 6 --draft-type Q4_K_M "$@" --out $d > $O/mk.$(basename $d).txt 2>&1
}
stamp "models (background) + gpu_check --quick, --no-matmul"
( mk $M6; mk $M8 --residual-gain 0.05 ) & mkpid=$!
timeout 200 $C/bin/gpu_check --quick > $O/check.log 2>&1; echo "check --quick rc=$?"
grep -E "^FAIL|SUMMARY" $O/check.log | head -20
timeout 150 $C/bin/gpu_check --no-matmul > $O/check2.log 2>&1; echo "check --no-matmul rc=$?"
grep -E "^FAIL|SUMMARY" $O/check2.log | head -20
wait $mkpid
T=$M6/target.gguf
stamp "prefill rates"
for v in specd.base:256 specd.d:256 specd:256 specd:512; do
  b=${v%%:*}; mb=${v##*:}
  for p in 256 1024 4096; do
    timeout 60 $C/bin/$b bench --backend cuda --model $T --ctx $((p + 64)) --prefill $p --batches 1 --verify-k 1 --reps 2 --max-batch-tokens $mb > $O/$b.mb$mb.pre$p.txt 2>&1
    echo "$b max-batch-tokens $mb: $(grep -h '^prefill' $O/$b.mb$mb.pre$p.txt)"
  done
done
stamp "six streams through the services, k = 4, ~80% pair"
OUT=$O/s6k4 TARGET=$M8/target.gguf DRAFT=$M8/draft.gguf TOKENS=256 SPEC_FLAGS="--k 4 --no-adaptive" timeout 200 bash tests/gpu/batch_spec.sh 2>&1 | tail -n 12
stamp done
tar -czf $R/r13e.tgz -C $O .
