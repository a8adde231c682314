#!/usr/bin/env bash
# Round 36 call W: the warm-up on the GPU (round 35's call A, never run; its side-by-side part is callP.sh).
# The ~80% pair in process, `specd generate` of 256 tokens, adaptive and k = 6, two reps: this tree with
# --warmup auto (the shapes run and every length's step costs measured before the request) / off; each run's
# summary (tok/s, mean k, the adaptive k histogram, step times) and its graphs (the request's own launches,
# captures and eager batches in brackets; ARMS / ARMS_K6: other BIN:MODE lists). Then (SIX=0 skips) six
# streams through the services, k = 4 and adaptive, with the coordinator's warm-up off (nowarm) and on (new);
# round 17's cohort script.
#   pack: bash docs/runs/round36/pack.sh
#   run(command="bash docs/runs/round36/callW.sh", carry=[".devpackR36"])   (~7 min)
set -u
export DEVPACK=${DEVPACK:-.devpackR36/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M8" --residual-gain 0.05
stamp "~80% pair in process, specd generate 256 tokens: --warmup auto / off"
P="The history of the city begins with a small harbour where fishermen"
for rep in $(seq "${REPS:-2}"); do
  for mode in adaptive k6; do
    arms=${ARMS:-specd:auto specd:off}
    [ "$mode" = k6 ] && arms=${ARMS_K6:-$arms}
    for arm in $arms; do
      b=${arm%%:*} wu=${arm#*:}
      args=()
      [ "$mode" = adaptive ] || args=(--k "${mode#k}")
      timeout 90 "$C/bin/$b" generate --backend cuda --max-seqs 1 --max-seq-len 2048 --max-tokens 256 \
        --ignore-eos --prompt "$P" --model "$M8/target.gguf" --draft "$M8/draft.gguf" "${args[@]}" --warmup "$wu" \
        2> "$O/gen.$mode.$b.$wu.$rep.log" > /dev/null
      echo "rc=$? $mode $b warmup=$wu rep $rep:"
      { grep -h 'msg="warm-up' "$O/gen.$mode.$b.$wu.$rep.log" | sed 's/.*ran=/warm-up: /'
        grep -v '^ts=' "$O/gen.$mode.$b.$wu.$rep.log"; } | sed 's/^/    /' | cut -c1-400
    done
  done
done
tar -cJf "$O/gen.logs.tar.xz" -C "$O" $(cd "$O" && ls gen.*.log) && rm -f "$O"/gen.*.log
if [ "${SIX:-1}" = 1 ] && before 330 "six streams"; then
  SETS="nowarm new" MODES="k4 adaptive" REPS=1 OUT=$O bash docs/runs/round17/callCohort.sh 2>&1 | grep -vE "^NVIDIA"
fi
stamp done
bundle_out
