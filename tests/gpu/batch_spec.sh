#!/usr/bin/env bash
# Batched speculation through the three services (issue 12 item 7): the same
# load of N concurrent streams (default 6, the seed's final setting) with
# speculation off and on, aggregate output tok/s from `specd loadgen`, and
# the ratio. Greedy, fixed-length outputs; the speculative run also checks
# its outputs against target-only references (--verify-greedy).
#
# Env:
#   TARGET, DRAFT  the pair (default: the 27B-class pair tests/gpu/peer_bench.sh
#                  makes in /tmp/peer_models)
#   BACKEND (cuda)  STREAMS (6)  REQUESTS (4 x STREAMS)  TOKENS (128)
#   PROMPT_TOKENS (128)  MAX_SEQ_LEN (2048)  SPEC_FLAGS (coordinator flags of
#   the speculative run; default adaptive)  WORKER_FLAGS (both workers, both
#   runs: e.g. "--batch-wait-us 3000")  COORD_FLAGS (the coordinator, both
#   runs: e.g. "--lockstep=false" to let the streams drift out of phase)
#   SVC_UNIX (1: the workers on unix sockets instead of loopback TCP)
#   SAMPLE_FLAGS (loadgen, both runs: e.g. "--temperature 0.7 --top-p 0.9";
#   sampled outputs are not checked against the greedy references)
#   CARRY (.devcarry: bin/ lib/)
#   RUNS ("off on"; "off" or "on" alone: one of the two, e.g. several speculative settings against one
#   target-only run)
# Output: $OUT/{off,on}.{target,draft,coord,loadgen}.log, {off,on}.stats.txt
# (specd stats after the load) and a table on stdout.
# Here (plumbing only, CPU, a small pair):
#   BACKEND=cpu TARGET=... DRAFT=... STREAMS=2 TOKENS=16 PROMPT_TOKENS=16 \
#     CARRY=build-cpu-layout bash tests/gpu/batch_spec.sh
set -u
OUT=${OUT:-/tmp/batch_out}
mkdir -p "$OUT"
root=$(pwd)
C=${CARRY:-$root/.devcarry}
[ -d "$C" ] || { [ -f .devpack/devcarry.tar.xz ] && tar -xJf .devpack/devcarry.tar.xz; }
export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
S=$C/bin/specd
M=/tmp/peer_models/qwen3-27b-Q4_K_S-d6-Q4_K_M
TARGET=${TARGET:-$M/target.gguf}
DRAFT=${DRAFT:-$M/draft.gguf}
BACKEND=${BACKEND:-cuda}
STREAMS=${STREAMS:-6}
REQUESTS=${REQUESTS:-$((4 * STREAMS))}
TOKENS=${TOKENS:-128}
PROMPT_TOKENS=${PROMPT_TOKENS:-128}
MAX_SEQ_LEN=${MAX_SEQ_LEN:-2048}
SPEC_FLAGS=${SPEC_FLAGS:-}
RUNS=${RUNS:-off on}
TP=${BATCH_TARGET_PORT:-18811}
DP=${BATCH_DRAFT_PORT:-18812}
CO=127.0.0.1:${BATCH_COORD_PORT:-18810}

for b in specd specd-target-worker specd-draft-worker specd-coordinator; do
  [ -x "$C/bin/$b" ] || { echo "missing $C/bin/$b (tests/gpu/make_carry.sh with all four binaries)"; exit 1; }
done
[ -f "$TARGET" ] && [ -f "$DRAFT" ] || { echo "missing the pair: $TARGET $DRAFT"; exit 1; }

# shellcheck source=tests/gpu/services.sh
. "$root/tests/gpu/services.sh"
SVC_FLAGS="--backend $BACKEND --max-seqs $STREAMS --max-seq-len $MAX_SEQ_LEN ${WORKER_FLAGS:-}"
SVC_READY_S=120

# run TAG COORDINATOR-FLAGS...: the three processes, one loadgen, then stop.
run() {
  local tag=$1; shift
  # shellcheck disable=SC2086
  if ! svc_start "$tag" "$TARGET" "$DRAFT" ${COORD_FLAGS:-} "$@"; then
    echo "$tag: services did not become ready"
    stop_all
    return 1
  fi
  local extra=()
  [ "$tag" = off ] && extra=(--no-speculation)
  [ "$tag" = on ] && [ -z "${SAMPLE_FLAGS:-}" ] && extra=(--verify-greedy)
  # shellcheck disable=SC2206
  extra+=(${SAMPLE_FLAGS:-})
  timeout 400 "$S" loadgen --coordinator $CO --concurrency "$STREAMS" --requests "$REQUESTS" \
    --warmup "$STREAMS" --max-tokens "$TOKENS:$TOKENS" --prompt-tokens "$PROMPT_TOKENS:$PROMPT_TOKENS" \
    --ignore-eos "${extra[@]}" > "$OUT/$tag.loadgen.log" 2>&1
  echo "$tag: loadgen rc=$?"
  # The batches' composition (sequences per verify / per proposal): streams
  # out of phase show as ~1 per verify.
  timeout 20 "$S" stats --coordinator $CO > "$OUT/$tag.stats.txt" 2>&1
  grep -E "^(batches|lockstep|step time|  speculative steps|  target-only steps)" "$OUT/$tag.stats.txt" | sed "s/^/$tag: /"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader 2> /dev/null | sed "s/^/$tag: nvidia-smi memory.used /"
  stop_all
}

tps() { sed -n 's/^throughput: \([0-9.]*\) output tokens\/s.*/\1/p' "$OUT/$1.loadgen.log" 2> /dev/null | tail -1; }
case " $RUNS " in *" off "*) run off ;; esac
# shellcheck disable=SC2086
case " $RUNS " in *" on "*) run on $SPEC_FLAGS ;; esac
off=$(tps off); on=$(tps on)
echo
echo "| $STREAMS streams, $TOKENS tokens each, greedy, $BACKEND | aggregate output tok/s |"
echo "| --- | ---: |"
echo "| target-only | ${off:-n/a} |"
echo "| speculative (${SPEC_FLAGS:-adaptive}) | ${on:-n/a} |"
if [ -n "$off" ] && [ -n "$on" ]; then
  echo "| ratio | $(python3 -c "print(f'{$on / $off:.2f}x')") |"
fi
case " $RUNS " in *" on "*) ;; *) exit 0 ;; esac
grep -hE "^speculation:|^verify-greedy:" "$OUT/on.loadgen.log"
[ -n "${SAMPLE_FLAGS:-}" ] || grep -q "verify-greedy: .* 0 mismatches" "$OUT/on.loadgen.log"
