#!/usr/bin/env bash
# Round 42's next call (not run: the budget ended after call D; pack .devpackE42 built in this workspace from 22a4eba): the wgmma matvec with two stages a block
# (stages2.patch; call D's three stages give two blocks an SM, 30 columns 8-12% slower than mma.sync on the large
# matrices; the prototype's two stages / four blocks an SM ran 30 columns at 55.9 us against 71.0 with three):
#  1. gpu_check.s2 --wgmma-cols 1-32 --matmul-only --types Q4_K,Q5_K (bit-exact at every column count, 90 s);
#  2. --bench-matvec: off (mma.sync), the tree's 1-32 (three stages), s2 1-32;
#  3. specd bench, six sequences' verify 2 / 4 at 1024 and batch 8's verify 1 / 2 (16 / 24 columns): off, the tree's
#     default (17-24), s2 17-32, s2 9-32;
#  4. on an H200 only: decode and the 7-token pass pinned at 4200 (issue 11), two reps;
#  5. six streams (no target-only run: call D's 584.8 tok/s on an H100): k = 4 off / s2's 17-32 on the target
#     worker, then k = 3 off / the default 17-24, as time allows.
#   pack: the tree built (build-cuda), BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd specd-coordinator
#         specd-draft-worker specd-target-worker gpu_check" tests/gpu/make_carry.sh; then `git apply
#         docs/runs/round42/stages2.patch`, ninja specd gpu_check specd-target-worker, copied in as specd.s2,
#         gpu_check.s2, specd-target-worker.s2, `git checkout common/backend/cuda/k_matvec.cu`;
#         mkdir -p .devpackE42; XZ_OPT=-9 tar -cJf .devpackE42/devcarry.tar.xz .devcarry
#   run(command="bash docs/runs/round42/callE.sh", carry=[".devpackE42"])   (~6 min)
set -u
export DEVPACK=${DEVPACK:-.devpackE42/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M6" & mk=$!
stamp "gpu_check.s2 --wgmma-cols 1-32 --matmul-only --types Q4_K,Q5_K"
timeout 90 "$C/bin/gpu_check.s2" --wgmma-cols 1-32 --matmul-only --types Q4_K,Q5_K > "$O/check_s2.log" 2>&1
echo "rc=$? ($(grep -c '^PASS' "$O/check_s2.log") passed, $(grep -c '^FAIL' "$O/check_s2.log") failed)"
grep -E "^FAIL" "$O/check_s2.log" | head -10
fails=$(grep -c '^FAIL' "$O/check_s2.log")
xz -9 "$O/check_s2.log"
for v in "mma gpu_check off" "wg3 gpu_check 1-32" "wg2 gpu_check.s2 1-32"; do
  set -- $v
  stamp "$2 --bench-matvec --wgmma-cols $3"
  timeout 40 "$C/bin/$2" --bench-matvec --wgmma-cols "$3" 2>&1 | tee "$O/bench_matvec.$1.txt" | grep -E "Q4_K|Q5_K"
done
wait $mk
for v in "specd off" "specd 17-24" "specd.s2 17-32" "specd.s2 9-32"; do
  set -- $v
  stamp "$1 --cuda-wgmma-cols $2: six sequences' verify 2, 4 at 1024; batch 8, verify 1, 2"
  BENCH_TIMEOUT=40 bench_row "$1" --ctx 1024 --prefill 64 --batches 6,8 --verify-k 2,4 --verify-seqs 6 \
    --cuda-wgmma-cols "$2"
  BENCH_TIMEOUT=40 bench_row "$1" --ctx 1024 --prefill 64 --batches 8 --verify-k 1,2 --verify-seqs 8 \
    --cuda-wgmma-cols "$2"
done
# Issue 11's 7-token pass / decode step pinned at 4200 on an H200 (unmeasured since round 35; the default range
# leaves 1-16 columns on mma.sync): two reps, only where this call got an H200.
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  for rep in 1 2; do
    stamp "H200 rep $rep: decode and the 7-token pass at 4200 (specd, default range)"
    BENCH_TIMEOUT=50 bench_row specd --ctx 4200 --prefill 4096 --batches 1 --verify-k 6
  done
fi
if [ "$fails" = 0 ] && before 330 "six streams"; then
  make_pair "$M8" --residual-gain 0.05
  # k = 4 (30 columns): off against s2's 17-32 (the s2 target worker for that run only); then k = 3 (24 columns
  # for six members): the tree's default range against off.
  cp "$C/bin/specd-target-worker" "$C/bin/specd-target-worker.tree"
  for v in "k4.off 4 off" "k4.s2 4 17-32" "k3.off 3 off" "k3.def 3 17-24"; do
    set -- $v
    before 540 "six streams $1" || break
    stamp "six streams $1: k = $2, target --cuda-wgmma-cols $3"
    w=specd-target-worker.tree
    [ "$1" = k4.s2 ] && w=specd-target-worker.s2
    cp "$C/bin/$w" "$C/bin/specd-target-worker"
    SVC_TARGET_FLAGS="--cuda-wgmma-cols $3" OUT=$O/six/$1 RUNS=on TARGET=$M8/target.gguf DRAFT=$M8/draft.gguf \
      TOKENS=256 SPEC_FLAGS="--k $2 --no-adaptive" timeout 120 bash tests/gpu/batch_spec.sh > "$O/six_$1.txt" 2>&1
    echo "rc=$?"
    grep -hE "^\| (target-only|speculative)|^verify-greedy:|^  speculative steps" "$O/six_$1.txt" "$O/six/$1/on.stats.txt" \
      2> /dev/null | cut -c1-300
  done
fi
stamp done
