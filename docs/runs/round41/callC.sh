#!/usr/bin/env bash
# Round 41's prepared call (no device call ran this round): the wgmma wide matvec (Q4_K / Q5_K, 17-32 columns,
# --cuda-wgmma-matvec, off by default) checked and measured against the mma.sync kernel, same binaries:
#  1. gpu_check --wgmma --matmul-only --types Q4_K,Q5_K: every kernel == mmv::Emulate bit for bit at n = 1..64;
#  2. gpu_check --bench-matvec without / with --wgmma (Q4_K / Q5_K rows);
#  3. specd bench of the 6-layer pair's target: batch 6 / 8 decode, six sequences' verify 2 / 4 at 1024,
#     without / with --cuda-wgmma-matvec, alternating;
#  4. if 1 passed: six streams (the ~80% pair, tests/gpu/batch_spec.sh as round 40's callS.sh): target-only,
#     then k = 4 and adaptive, each without / with the target worker's --cuda-wgmma-matvec, alternating;
#  5. the standalone prototype (proto_wgfold, if carried) with what time is left.
#   pack: BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd specd-coordinator specd-draft-worker
#         specd-target-worker gpu_check" tests/gpu/make_carry.sh; optionally the prototype into .devcarry/bin
#         (round 30's proto_f16mma.cu + proto_wgfold.patch, nvcc -gencode arch=compute_90a,code=sm_90a: README);
#         7f8e204's specd as .devcarry/bin/specd.head (optional: the quantizers' extra bytes on the decode);
#         mkdir -p .devpackC41; XZ_OPT=-9 tar -cJf .devpackC41/devcarry.tar.xz .devcarry   (foreground, xz -t)
#   run(command="bash docs/runs/round41/callC.sh", carry=[".devpackC41"])   (~8 min; REPS, SIX=0 to shorten)
set -u
export DEVPACK=${DEVPACK:-.devpackC41/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
stamp "gpu_check --wgmma --matmul-only --types Q4_K,Q5_K"
timeout "${CHECK_S:-90}" "$C/bin/gpu_check" --wgmma --matmul-only --types Q4_K,Q5_K > "$O/check_wgmma.log" 2>&1
echo "rc=$? ($(grep -c '^PASS' "$O/check_wgmma.log") passed, $(grep -c '^FAIL' "$O/check_wgmma.log") failed)"
grep -E "^FAIL|SUMMARY" "$O/check_wgmma.log" | head -20
fails=$(grep -c '^FAIL' "$O/check_wgmma.log")
passes=$(grep -c '^PASS' "$O/check_wgmma.log")
xz -9 "$O/check_wgmma.log"
for f in "" --wgmma; do
  stamp "gpu_check --bench-matvec $f"
  timeout 40 "$C/bin/gpu_check" --bench-matvec $f 2>&1 | tee "$O/bench_matvec${f:+.wgmma}.txt" | grep -E "Q4_K|Q5_K" | head -16
done
make_pair "$M6"
for rep in $(seq "${REPS:-2}"); do
  for f in "" --cuda-wgmma-matvec; do
    stamp "specd bench ${f:-(mma.sync)} rep $rep: batch 6, 8; six sequences' verify 2, 4 at 1024"
    BENCH_TIMEOUT=40 bench_row specd --ctx 1024 --prefill 64 --batches 6,8 --verify-k 2,4 --verify-seqs 6 $f
  done
done
# The quantizers now also write the records' K-major copy (both settings): the decode against 7f8e204's
# specd (specd.head, if carried), alternating.
if [ -x "$C/bin/specd.head" ]; then
  for rep in $(seq "${REPS:-2}"); do
    for b in specd specd.head; do
      stamp "$b rep $rep: decode at 64 and 4200, verify 6 at 4200"
      BENCH_TIMEOUT=30 bench_row "$b" --ctx 64 --prefill 16 --batches 1 --verify-k 1
      BENCH_TIMEOUT=50 bench_row "$b" --ctx 4200 --prefill 4096 --batches 1 --verify-k 6
    done
  done
fi
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
  six off off "" ""
  for rep in $(seq "${SIX_REPS:-1}"); do
    six "k4.mma$rep" on "--k 4 --no-adaptive" ""
    six "k4.wg$rep" on "--k 4 --no-adaptive" --cuda-wgmma-matvec
    six "adaptive.mma$rep" on "" ""
    six "adaptive.wg$rep" on "" --cuda-wgmma-matvec
  done
  (cd "$O" && tar -czf six_logs.tgz six 2> /dev/null && rm -rf six)
else
  stamp "no six streams (checks: $passes passed, $fails failed; SIX=${SIX:-1})"
fi
if [ -x "$C/bin/proto_wgfold" ] && before 540 prototype; then
  timeout 50 "$C/bin/proto_wgfold" > "$O/proto.txt" 2>&1
  echo "rc=$?"
  cat "$O/proto.txt"
fi
stamp done
