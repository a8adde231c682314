#!/usr/bin/env bash
# Round 40 call S: six streams through the three services on the ~80% pair (tests/gpu/batch_spec.sh, 256 tokens
# each, greedy, lockstep), this tree's binaries: target-only once, then speculation at fixed k = KS and adaptive
# (REPS_ADAPTIVE runs), each in fresh services (fresh cost cells). Issue 12: six streams >= 1.5x target-only, and
# adaptive within 3% of the best fixed k on every workload measured (round 40's call E: adaptive 1.23x with its
# cells pricing 30-column verifies at 23-28 ms, round 37's at 17). On an H200 it then runs issue 11's pinned
# 7-token pass / decode step (specd bench, 6-layer target, depth 4096).
#   pack: BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="specd specd-coordinator specd-draft-worker
#         specd-target-worker gpu_check" tests/gpu/make_carry.sh; mkdir -p .devpackS40
#         XZ_OPT=-9 tar -cJf .devpackS40/devcarry.tar.xz .devcarry
#   run(command="bash docs/runs/round40/callS.sh", carry=[".devpackS40"])   (~5 min)
set -u
export DEVPACK=${DEVPACK:-.devpackS40/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M8" --residual-gain 0.05
mkdir -p "$O/stats"
six() {  # six TAG RUNS SPEC_FLAGS [CARRY]: one batch_spec run (RUNS "off" or "on"), its table and stats kept
  local tag=$1 runs=$2 flags=$3 carry=${4:-$C}
  stamp "six streams, $tag"
  CARRY=$carry OUT=$O/$tag RUNS=$runs TARGET=$M8/target.gguf DRAFT=$M8/draft.gguf TOKENS=256 SPEC_FLAGS="$flags" \
    timeout 120 bash tests/gpu/batch_spec.sh > "$O/$tag.txt" 2>&1
  echo "rc=$?"
  grep -hE "^\| (target-only|speculative)|^speculation:|^verify-greedy:" "$O/$tag.txt"
  cp "$O/$tag/$runs.stats.txt" "$O/stats/$tag.stats.txt" 2> /dev/null
  grep -hE "^(k histogram|step costs|  speculative steps|target:.*forwards)" "$O/$tag/$runs.stats.txt" 2> /dev/null |
    cut -c1-700
}
six off off ""
for k in ${KS:-3 4 5 6}; do
  before "${SIX_BEFORE:-330}" "k = $k" && six "k$k" on "--k $k --no-adaptive"
done
# ALT_REPS: adaptive with the pack's .devcarry/alt/bin binaries (a variant coordinator; the rest this tree's),
# alternating with this tree's; COORD_FLAGS reach both (e.g. "--log-level debug": a line per step).
if [ -d "$C/alt/bin" ]; then
  for b in "$C"/bin/*; do [ -e "$C/alt/bin/$(basename "$b")" ] || ln -s "$b" "$C/alt/bin/"; done
  [ -e "$C/alt/lib" ] || ln -s ../lib "$C/alt/lib"
fi
for rep in $(seq "${REPS_ADAPTIVE:-2}"); do
  before "${SIX_BEFORE:-330}" "adaptive $rep" && six "adaptive$rep" on ""
  if [ "$rep" -le "${ALT_REPS:-0}" ] && before "${SIX_BEFORE:-330}" "alt adaptive $rep"; then
    six "adaptivealt$rep" on "" "$C/alt"
  fi
done
stamp "summary (aggregate output tok/s, / target-only)"
base=$(table_tps target-only "$O/off.txt")
for f in "$O"/k*.txt "$O"/adaptive*.txt; do
  [ -f "$f" ] || continue
  v=$(sed -n 's/^| speculative ([^)]*) | \([0-9.]*\) |$/\1/p' "$f" | tail -1)
  echo "$(basename "$f" .txt): ${v:-n/a} (target-only ${base:-n/a})" |
    python3 -c 'import sys,re
for l in sys.stdin:
    m = re.match(r"(\S+): ([0-9.]+) \(target-only ([0-9.]+)\)", l)
    print(f"{m[1]}: {float(m[2]):.1f} ({float(m[2]) / float(m[3]):.2f}x)" if m else l.strip())'
done
(cd "$O" && tar -czf six_logs.tgz --exclude="*.txt" off k[0-9]* adaptive[0-9a]* 2> /dev/null)
for d in "$O"/off "$O"/k[0-9]* "$O"/adaptive[0-9a]*; do [ -d "$d" ] && rm -rf "$d"; done
if nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | grep -q H200 && before 470 "pinned 7-token pass"; then
  make_pair "$M6"
  stamp "pinned bench, 6-layer target, depth 4096: decode and the 7-token pass (verify k = 6)"
  timeout 90 "$C/bin/specd" bench --backend cuda --model "$M6/target.gguf" --ctx 4096 --prefill 512 --batches 1 \
    --verify-k 6 --reps 5 2>&1 | tail -n 12
fi
stamp done
bundle_out
