#!/usr/bin/env bash
# Round 43 call F: the wgmma matvec with two stages a block at <= 128 registers a thread (__launch_bounds__(256, 2):
# four 4-warp blocks an SM at 25-32 columns, where call E's two stages at 133-141 registers kept three and ran 30
# columns no faster) and the wgmma kernel below 17 columns only from 256 tiles (4096 rows) on. `X` = this tree,
# `X.base` = round 42's (three stages, one block's launch bounds; from .devpackE42).
#  1. gpu_check --wgmma-cols 1-32 --matmul-only --types Q4_K,Q5_K (bit-exact on both paths, 60 s);
#  2. --bench-matvec: base 1-32, new 1-32, off;
#  3. specd bench (six sequences' verify 1 / 2 / 4 at 1024, batch 8 verify 1): base 17-24 (round 42's default),
#     new off / 9-24 / 9-32;
#  4. on an H200 only: decode and the 7-token pass pinned at 4200 (issue 11), two reps;
#  5. six streams (~80% pair, fresh services each): target-only, k = 4 new 9-32, k = 4 off, k = 3 new 9-32.
#   pack: the tree built (build-cuda, sm_90a), BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd
#         specd-coordinator specd-draft-worker specd-target-worker gpu_check" tests/gpu/make_carry.sh; round 42's
#         specd, gpu_check, specd-target-worker from .devpackE42 copied in as X.base;
#         mkdir -p .devpackF43; XZ_OPT=-9 tar -cJf .devpackF43/devcarry.tar.xz .devcarry
#   run(command="bash docs/runs/round43/callF.sh", carry=[".devpackF43"])   (~6 min)
set -u
export DEVPACK=${DEVPACK:-.devpackF43/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M6" & mk=$!
stamp "gpu_check --wgmma-cols 1-32 --matmul-only --types Q4_K,Q5_K"
timeout 60 "$C/bin/gpu_check" --wgmma-cols 1-32 --matmul-only --types Q4_K,Q5_K > "$O/check.log" 2>&1
echo "rc=$? ($(grep -c '^PASS' "$O/check.log") passed, $(grep -c '^FAIL' "$O/check.log") failed)"
grep -E "^FAIL" "$O/check.log" | head -10
fails=$(grep -c '^FAIL' "$O/check.log")
xz -9 "$O/check.log"
for v in "base gpu_check.base 1-32" "new gpu_check 1-32" "off gpu_check off"; do
  set -- $v
  stamp "$2 --bench-matvec --wgmma-cols $3"
  timeout 40 "$C/bin/$2" --bench-matvec --wgmma-cols "$3" 2>&1 | tee "$O/bench_matvec.$1.txt" | grep -E "Q4_K|Q5_K"
done
wait $mk
for v in "specd.base 17-24" "specd off" "specd 9-24" "specd 9-32"; do
  set -- $v
  stamp "$1 --cuda-wgmma-cols $2: six sequences' verify 1, 2, 4 at 1024; batch 8, verify 1"
  BENCH_TIMEOUT=40 bench_row "$1" --ctx 1024 --prefill 64 --batches 6 --verify-k 1,2,4 --verify-seqs 6 \
    --cuda-wgmma-cols "$2"
  BENCH_TIMEOUT=40 bench_row "$1" --ctx 1024 --prefill 64 --batches 8 --verify-k 1 --verify-seqs 8 \
    --cuda-wgmma-cols "$2"
done
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  for rep in 1 2; do
    stamp "H200 rep $rep: decode and the 7-token pass at 4200 (specd, 9-32)"
    BENCH_TIMEOUT=50 bench_row specd --ctx 4200 --prefill 4096 --batches 1 --verify-k 6 --cuda-wgmma-cols 9-32
  done
fi
if [ "$fails" = 0 ] && before 300 "six streams"; then
  make_pair "$M8" --residual-gain 0.05
  for v in "off off 0 off" "k4.new on 4 9-32" "k4.off on 4 off" "k3.new on 3 9-32"; do
    set -- $v
    before 540 "six streams $1" || break
    stamp "six streams $1: k = $3, target and draft --cuda-wgmma-cols $4"
    SVC_TARGET_FLAGS="--cuda-wgmma-cols $4" SVC_DRAFT_FLAGS="--cuda-wgmma-cols $4" OUT=$O/six/$1 RUNS=$2 \
      TARGET=$M8/target.gguf DRAFT=$M8/draft.gguf TOKENS=256 SPEC_FLAGS="--k $3 --no-adaptive" \
      timeout 120 bash tests/gpu/batch_spec.sh > "$O/six_$1.txt" 2>&1
    echo "rc=$?"
    grep -hE "^\| (target-only|speculative)|^verify-greedy:|^  speculative steps" "$O/six_$1.txt" \
      "$O/six/$1/$2.stats.txt" 2> /dev/null | cut -c1-300
  done
fi
stamp done
bundle_out
