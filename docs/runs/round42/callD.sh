#!/usr/bin/env bash
# (Ran as round 42 call D with 35ba116's binaries and their flags: --wgmma / --wgmma-min-cols, --cuda-wgmma-matvec /
# --cuda-wgmma-min-cols; since then one setting, --cuda-wgmma-cols MIN-MAX|off, gpu_check --wgmma-cols.)
# Round 42's call: the wgmma matvec (Q4_K / Q5_K, --cuda-wgmma-matvec, off by default) checked and measured
# against the mma.sync kernels, same binaries, now also on the narrow launches (--cuda-wgmma-min-cols N: products
# of N columns or more, n8 / n16 tiles below 17 columns):
#  1. gpu_check --wgmma --wgmma-min-cols 1 --matmul-only --types Q4_K,Q5_K: every column count 1..64 on the
#     wgmma kernel == mmv::Emulate bit for bit;
#  2. gpu_check --bench-matvec: off, --wgmma (17-32 columns), --wgmma --wgmma-min-cols 1 (every n);
#  3. specd bench of the 6-layer pair's target (pinned), a row each setting, alternating: decode and the 5- / 7-token
#     passes at 4200 (issue 11's 7-token pass / decode step), batch 6 / 8 decode and six sequences' verify 2 / 4
#     at 1024 (18 / 30 columns: the six-stream verify);
#  4. if 1 passed: six streams (the ~80% pair, tests/gpu/batch_spec.sh): target-only, k = 4 and adaptive without /
#     with the target worker's wgmma (WG_FLAGS);
#  5. the standalone prototype (proto_wgfold, if carried) with what time is left.
#   pack: BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd specd-coordinator specd-draft-worker
#         specd-target-worker gpu_check" tests/gpu/make_carry.sh; the prototype into .devcarry/bin (round 41's
#         README); mkdir -p .devpackD42; XZ_OPT=-9 tar -cJf .devpackD42/devcarry.tar.xz .devcarry (xz -t)
#   run(command="bash docs/runs/round42/callD.sh", carry=[".devpackD42"])   (~8 min; SIX=0 to shorten)
set -u
export DEVPACK=${DEVPACK:-.devpackD42/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M6" & mk=$!
stamp "gpu_check --wgmma --wgmma-min-cols 1 --matmul-only --types Q4_K,Q5_K"
timeout "${CHECK_S:-120}" "$C/bin/gpu_check" --wgmma --wgmma-min-cols 1 --matmul-only --types Q4_K,Q5_K \
  > "$O/check_wgmma.log" 2>&1
echo "rc=$? ($(grep -c '^PASS' "$O/check_wgmma.log") passed, $(grep -c '^FAIL' "$O/check_wgmma.log") failed)"
grep -E "^FAIL|SUMMARY" "$O/check_wgmma.log" | head -24
fails=$(grep -c '^FAIL' "$O/check_wgmma.log")
passes=$(grep -c '^PASS' "$O/check_wgmma.log")
xz -9 "$O/check_wgmma.log"
bm() {  # bm TAG FLAGS...
  stamp "gpu_check --bench-matvec $*"
  local tag=$1
  shift
  timeout 40 "$C/bin/gpu_check" --bench-matvec "$@" 2>&1 | tee "$O/bench_matvec.$tag.txt" | grep -E "Q4_K|Q5_K" |
    head -8
}
bm mma
bm wg --wgmma
bm wg1 --wgmma --wgmma-min-cols 1
wait $mk
WG=(mma "" wg "--cuda-wgmma-matvec" wg5 "--cuda-wgmma-matvec --cuda-wgmma-min-cols 5"
    wg1 "--cuda-wgmma-matvec --cuda-wgmma-min-cols 1")
for rep in $(seq "${REPS:-1}"); do
  for ((i = 0; i < ${#WG[@]}; i += 2)); do
    before 330 "bench ${WG[i]}" || break
    stamp "specd bench ${WG[i]} rep $rep: decode, verify 4 / 6 at 4200; batch 6, 8, six sequences' verify 2, 4 at 1024"
    # shellcheck disable=SC2086
    BENCH_TIMEOUT=50 bench_row specd --ctx 4200 --prefill 4096 --batches 1 --verify-k 1,4,6 ${WG[i + 1]}
    # shellcheck disable=SC2086
    BENCH_TIMEOUT=40 bench_row specd --ctx 1024 --prefill 64 --batches 6,8 --verify-k 2,4 --verify-seqs 6 ${WG[i + 1]}
  done
done
if [ "$fails" = 0 ] && [ "$passes" -gt 20 ] && [ "${SIX:-1}" = 1 ]; then
  make_pair "$M8" --residual-gain 0.05
  six() {  # six TAG RUNS SPEC_FLAGS TARGET_FLAGS
    before "${SIX_BEFORE:-500}" "$1" || return 0
    stamp "six streams, $1"
    SVC_TARGET_FLAGS="$4" OUT=$O/six/$1 RUNS=$2 TARGET=$M8/target.gguf DRAFT=$M8/draft.gguf TOKENS=256 \
      SPEC_FLAGS="$3" timeout 120 bash tests/gpu/batch_spec.sh > "$O/six_$1.txt" 2>&1
    echo "rc=$?"
    grep -hE "^\| (target-only|speculative)|^speculation:|^verify-greedy:" "$O/six_$1.txt"
    grep -hE "^  speculative steps" "$O/six/$1/$2.stats.txt" 2> /dev/null | cut -c1-300
  }
  WGF=${WG_FLAGS:---cuda-wgmma-matvec}
  six off off "" ""
  for rep in $(seq "${SIX_REPS:-1}"); do
    six "k4.mma$rep" on "--k 4 --no-adaptive" ""
    six "k4.wg$rep" on "--k 4 --no-adaptive" "$WGF"
    six "adaptive.wg$rep" on "" "$WGF"
    six "adaptive.mma$rep" on "" ""
  done
  (cd "$O" && tar -czf six_logs.tgz six 2> /dev/null && rm -rf six)
else
  stamp "no six streams (checks: $passes passed, $fails failed; SIX=${SIX:-1})"
fi
if [ -x "$C/bin/proto_wgfold" ] && before 545 prototype; then
  timeout 45 "$C/bin/proto_wgfold" > "$O/proto.txt" 2>&1
  echo "rc=$?"
  cat "$O/proto.txt"
fi
stamp done
