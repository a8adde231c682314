#!/usr/bin/env bash
# Round 37 call A: the adaptive policy after the warm-up, old tree (specd, round 36's pack) against the fix
# (specd.new: a cold step prices no overhead, and `specd generate` prints its step costs; call B: also the
# warm-up's sampled steps keep their costs apart), in process, `specd generate` of 256 tokens: the 6-layer
# pair (call P of round 37 had adaptive at 0.87x k = 3) adaptive with --warmup auto / off and k = 3; then the
# ~80% pair adaptive / k = 6. Two reps, alternating (ARMS6 / ARMS8 pick the runs).
#   pack: mkdir -p .devpackA37; cp build-cuda/cli/specd .devpackA37/specd.new; strip .devpackA37/specd.new;
#         xz -9 .devpackA37/specd.new   (beside .devpackP36, whose libraries it links)
#   run(command="bash docs/runs/round37/callA.sh", carry=[".devpackP36", ".devpackA37"])   (~4 min)
set -u
export DEVPACK=${DEVPACK:-.devpackP36/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
# PACK: every BIN.xz in it unpacked into .devcarry/bin (round 37: specd.new; round 38's call C also gpu_check builds).
PACK=${PACK:-.devpackA37}
for f in "$PACK"/*.xz; do
  [ -f "$f" ] || continue
  b=$(basename "$f" .xz)
  xz -dc "$f" > "$C/bin/$b" && chmod +x "$C/bin/$b"
done
exec > >(tee "$O/stdout.txt") 2>&1
# CHECKS: BIN:FLAG runs of gpu_check builds first (round 38: "gpu_check.old:--spec gpu_check.new:--no-matmul").
for g in ${CHECKS:-}; do GPU_CHECK=${g%%:*} CHECK_TIMEOUT=240 gpu_checks "${g#*:}"; done
P="The history of the city begins with a small harbour where fishermen"
gen() {  # PAIR DIR, MODE (adaptive | kN), BIN, WARMUP, REP
  local m=$1 mode=$2 b=$3 wu=$4 rep=$5 args=() log
  case $mode in
    adaptive) ;;
    debug) args=(--log-level debug) ;;  # adaptive, its decisions' reasons in the log
    *) args=(--k "${mode#k}") ;;
  esac
  log="$O/gen.$(basename "$m").$mode.$b.$wu.$rep.log"
  timeout 90 "$C/bin/$b" generate --backend cuda --max-seqs 1 --max-seq-len 2048 --max-tokens 256 --ignore-eos \
    --prompt "$P" --model "$m/target.gguf" --draft "$m/draft.gguf" "${args[@]}" --warmup "$wu" 2> "$log" > /dev/null
  echo "rc=$? $(basename "$m") $mode $b warmup=$wu rep $rep:"
  grep -v '^ts=' "$log" | sed 's/^/    /' | cut -c1-700
}
# Arms: BIN:WARMUP:MODE (adaptive, debug: adaptive with the debug log, kN), run in this order each rep (ARMS6 on the 6-layer pair, ARMS8 on the ~80% pair).
ARMS6=${ARMS6:-specd:auto:adaptive specd:off:adaptive specd.new:auto:adaptive specd.new:off:adaptive specd.new:auto:k3}
ARMS8=${ARMS8:-specd:auto:adaptive specd.new:auto:adaptive specd.new:auto:k6}
arms() {  # PAIR, ARMS
  local m=$1 a b wu mode rep
  for rep in 1 2; do
    for a in $2; do
      b=${a%%:*} a=${a#*:} wu=${a%%:*} mode=${a#*:}
      gen "$m" "$mode" "$b" "$wu" "$rep"
    done
  done
}
make_pair "$M6"
stamp "6-layer pair: $ARMS6"
arms "$M6" "$ARMS6"
if before 330 "~80% pair"; then
  make_pair "$M8" --residual-gain 0.05
  stamp "~80% pair: $ARMS8"
  arms "$M8" "$ARMS8"
fi
# SIX=1: then six streams through the services with the pack's binaries (its specd.new as specd; adaptive;
# round 17's callCohort.sh, set "new").
if [ "${SIX:-0}" = 1 ] && before "${SIX_BEFORE:-400}" "six streams"; then
  [ ! -x "$C/bin/specd.new" ] || cp "$C/bin/specd.new" "$C/bin/specd"
  DEVPACK= SETS="new" MODES="adaptive" REPS=1 OUT=$O/six bash docs/runs/round17/callCohort.sh 2>&1 | grep -vE "^NVIDIA"
fi
# CHECKS_LATE: as CHECKS, after everything else (the longer checks, time allowing).
for g in ${CHECKS_LATE:-}; do before "${LATE_BEFORE:-420}" "$g" && GPU_CHECK=${g%%:*} CHECK_TIMEOUT=240 gpu_checks "${g#*:}"; done
tar -cJf "$O/gen.logs.tar.xz" -C "$O" $(cd "$O" && ls gen.*.log) && rm -f "$O"/gen.*.log
stamp done
bundle_out
