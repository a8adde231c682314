#!/usr/bin/env bash
# The CUDA IPC exchange path through the three services on one GPU, in one
# device-tool call: a draft and a target worker with --backend cuda and a
# coordinator on loopback, greedy and sampled requests with speculation on.
#
# Checks (one PASS/FAIL line each, then a verdict line; exit 1 on any FAIL):
#   - both workers log the device path ("draft exchange path: device",
#     "target exchange path: device") and the target accepts a sampled
#     proposal against the device rows ("first acceptance on the device";
#     greedy proposals carry no rows), with no device fault or fallback;
#   - greedy speculative output (k 2, 4, 6) equals --no-speculation output;
#   - sampled requests finish; `specd stats` shows acceptance > 0 and no
#     draft failures;
#   - after `specd swap-draft` the target re-opens the new device rows and
#     greedy output still equals target-only output;
#   - the same requests with the target forced to the host path
#     (--exchange-path host) give the same greedy and sampled tokens.
#
# Binaries and libraries come from .devcarry/ (tests/gpu/make_carry.sh), as
# in tests/gpu/e2e_device.sh. Logs under $OUT.
#   tests/gpu/ipc_device_check.sh            generated pair (vocab 32000), and
#                                            the trained pair when carried
set -u
OUT=${OUT:-/tmp/ipc_out}
mkdir -p "$OUT"
root=$(pwd)
C=${IPC_CARRY:-$root/.devcarry}  # bin/ lib/ models/
BACKEND=${IPC_BACKEND:-cuda}     # cpu: a dry run of this script's plumbing (the device checks then fail)
export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
S=$C/bin/specd
TP=${IPC_TARGET_PORT:-17811}
DP=${IPC_DRAFT_PORT:-17812}
CP=${IPC_COORD_PORT:-17810}
CO=127.0.0.1:$CP
fails=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
check() {  # check NAME CONDITION-COMMAND...
  local name=$1; shift
  if "$@"; then pass "$name"; else fail "$name"; fi
}

if ! "$S" --help > /dev/null 2>&1; then
  echo "FAIL carried specd does not start:"; ldd "$S" | grep -i "not found"; "$S" --help 2>&1 | head -5
  echo "VERDICT FAIL"; exit 1
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2

# shellcheck source=tests/gpu/services.sh
. "$root/tests/gpu/services.sh"
SVC_FLAGS="--backend $BACKEND --max-seqs 4 --max-seq-len 1024"
SVC_DRAFT_FLAGS="--k-max 8"
SVC_READY_S=60
# start TAG TARGET DRAFT [target flags...]: the three processes; waits for "draft ready".
start() {
  local tag=$1 target=$2 draft=$3; shift 3
  SVC_TARGET_FLAGS="$*" svc_start "$tag" "$target" "$draft" --no-adaptive --k 4 --min-confidence 0
}

# gen FILE ARGS...: one request through the coordinator; ids on FILE's "ids:" line, summary in FILE.err.
gen() {
  local f=$1; shift
  timeout 120 "$S" generate --coordinator $CO --ignore-eos --print-ids "$@" > "$f" 2> "$f.err"
  local rc=$?
  [ $rc = 0 ] || { echo "   generate $* -> rc $rc: $(tail -n 2 "$f.err")"; return 1; }
}
ids() { grep '^ids:' "$1"; }
same_ids() { [ -n "$(ids "$1")" ] && [ "$(ids "$1")" = "$(ids "$2")" ]; }
logged() { grep -q "$2" "$1"; }
not_logged() { ! grep -q "$2" "$1"; }
count() { grep -c "$2" "$1"; }
acceptance_positive() {  # from `specd stats`: "acceptance X% (A/P)" with A > 0
  "$S" stats --coordinator $CO > "$1" 2>&1
  local ap
  ap=$(grep -oE 'acceptance [0-9.]+% \([0-9]+/[0-9]+\)' "$1" | head -1 | grep -oE '[0-9]+/[0-9]+')
  echo "   stats: $(grep -m1 '^speculation:' "$1")"
  [ -n "$ap" ] && [ "${ap%/*}" -gt 0 ] && [ "${ap#*/}" -gt 0 ]
}

PROMPT=${IPC_PROMPT:-$'def fibonacci(n):\n    '}
SAMPLED=("--temperature 1.0 --seed 3" "--temperature 0.8 --top-k 40 --seed 5" "--temperature 0.7 --top-p 0.9 --seed 9")

# round NAME TARGET DRAFT: the device path, then the host path on the same pair.
round() {
  local n=$1 target=$2 draft=$3 d=$OUT/$1
  mkdir -p "$d"
  echo "== $n: device path ($target, $draft)"
  if ! start "$n.dev" "$target" "$draft"; then fail "$n: services start (device path)"; stop_all; return; fi
  local L=$OUT/$n.dev
  gen "$d/ref.txt" --prompt "$PROMPT" --max-tokens 96 --no-speculation || fail "$n: target-only request"
  for k in 2 4 6; do
    gen "$d/g$k.txt" --prompt "$PROMPT" --max-tokens 96 --k $k &&
      check "$n: greedy k=$k equals target-only" same_ids "$d/g$k.txt" "$d/ref.txt"
  done
  local i=0
  for s in "${SAMPLED[@]}"; do
    # shellcheck disable=SC2086
    gen "$d/s$i.dev.txt" --prompt "$PROMPT" --max-tokens 64 --k 4 $s || fail "$n: sampled request ($s)"
    i=$((i + 1))
  done
  check "$n: draft logs the device path" logged "$L.draft.log" "draft exchange path: device"
  check "$n: target logs the device path" logged "$L.target.log" "target exchange path: device"
  check "$n: target accepted on the GPU" logged "$L.target.log" "first acceptance on the device"
  check "$n: no device fault or host fallback" not_logged "$L.target.log" "device rows failed\|CUDA IPC open\|asked the draft for host rows"
  check "$n: stats show acceptance" acceptance_positive "$d/stats.txt"
  check "$n: no draft failures" grep -q '^draft: 0 failures' "$d/stats.txt"
  grep -h "exchange path" "$L.draft.log" "$L.target.log" | sed 's/^/   /'
  # Swap the draft (the same file: a fresh model and exchange buffer); the
  # target must re-open the new device rows.
  if timeout 120 "$S" swap-draft --coordinator $CO "$draft" > "$d/swap.txt" 2>&1; then
    sleep 1
    check "$n: target re-opened the device rows after the swap" \
      test "$(count "$L.target.log" "target exchange path: device")" -ge 2
    gen "$d/g4.swap.txt" --prompt "$PROMPT" --max-tokens 96 --k 4 &&
      check "$n: greedy after the swap equals target-only" same_ids "$d/g4.swap.txt" "$d/ref.txt"
    # shellcheck disable=SC2086
    gen "$d/s0.swap.txt" --prompt "$PROMPT" --max-tokens 64 --k 4 ${SAMPLED[0]} || fail "$n: sampled request after the swap"
    check "$n: accepted on the GPU after the swap" test "$(count "$L.target.log" "first acceptance on the device")" -ge 2
  else
    fail "$n: swap-draft: $(tail -n 2 "$d/swap.txt")"
  fi
  stop_all
  sleep 1

  echo "== $n: host path (target --exchange-path host)"
  if ! start "$n.host" "$target" "$draft" --exchange-path host; then fail "$n: services start (host path)"; stop_all; return; fi
  L=$OUT/$n.host
  check "$n: host-forced target logs the host path" logged "$L.target.log" "target exchange path: host"
  gen "$d/g4.host.txt" --prompt "$PROMPT" --max-tokens 96 --k 4 &&
    check "$n: greedy on the host path equals target-only" same_ids "$d/g4.host.txt" "$d/ref.txt"
  i=0
  for s in "${SAMPLED[@]}"; do
    # shellcheck disable=SC2086
    gen "$d/s$i.host.txt" --prompt "$PROMPT" --max-tokens 64 --k 4 $s &&
      check "$n: sampled ($s) device path equals host path" same_ids "$d/s$i.dev.txt" "$d/s$i.host.txt"
    i=$((i + 1))
  done
  stop_all
  sleep 1
}

P=/tmp/ipc_pair
if [ ! -f $P/target.gguf ]; then
  timeout 300 "$S" make-model --preset small --vocab-size 32000 --type Q8_0 --pair --draft-layers 2 --out $P \
    > "$OUT/make-model.log" 2>&1 || { tail -n 5 "$OUT/make-model.log"; fail "make-model"; }
fi
[ -f $P/target.gguf ] && round gen32k $P/target.gguf $P/draft.gguf
if [ -f "$C/models/pycode-target-10m-f16.gguf" ]; then
  PROMPT=$'import os\nimport sys\n\n\ndef main(argv):\n    """Parse the arguments and run."""\n'
  round pycode "$C/models/pycode-target-10m-f16.gguf" "$C/models/pycode-draft-0.4m-f16.gguf"
fi
if [ $fails = 0 ]; then echo "VERDICT PASS"; else echo "VERDICT FAIL ($fails failed)"; exit 1; fi
