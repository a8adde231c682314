#!/usr/bin/env bash
# specd side by side with llama.cpp (the peer) on the same GGUF files, in ONE
# device call (issue 11): both engines decode, verify/prompt-process and
# speculate on the pair that
#   specd make-model --preset qwen3-27b --type Q4_K_S --fill blocks --pair \
#     --draft-layers 6 --draft-type Q4_K_M
# writes, and the script prints one table (figure | llama.cpp | specd | ratio,
# ratio = ours / llama.cpp) made by tests/gpu/peer_table.py.
#
# Stages (each under `timeout`, all within PEER_BUDGET_S, default 540 s):
#   llama.cpp   $LLAMA_BIN, or /tmp/peer (a warm machine's earlier unpack or
#               build), or the carried .peer/llama-cuda.tar.xz (packed here by
#               tests/gpu/pack_peer.sh), or built from the carried
#               .peer/llama.cpp-b0.3.36-cuda-src.tar.xz (~6 min; the packed
#               build comes back as $OUT/llama-cuda.tar.xz for the next call)
#   specd       $SPECD_BIN, or .devcarry/bin/specd (from .devpack/devcarry.tar.xz,
#               tests/gpu/make_carry.sh)
#   models      make-model --fill blocks --sync=false into /tmp/peer_models
#               (kept: a warm machine's next call skips it)
#   llama-bench tg128 at depth 0 and DEPTH, pp2..pp9 (and pp128, pp512: the
#               prefill rows) at depth 0 and DEPTH (-o jsonl), the draft's
#               tg128; -ngl 99 -fa 1
#   specd bench decode at ctx 64 and DEPTH, verify k=1..8 at DEPTH, the draft;
#               prefill of 128 (ctx 64 run) and 512 tokens (DEPTH run)
#   generate    target only and the draft alone, NTOK tokens, greedy:
#               llama-completion vs specd
#   speculative llama-speculative-simple --spec-draft-n-max N (p-min 0) vs
#               specd generate --draft --k N, for N in $SPEC_NS (default
#               "3 6"), and specd's adaptive; same prompt
# Other pairs (issue 12 item 6: pairs that represent the field):
#   DRAFT_LAYERS (6), DRAFT_TYPE (Q4_K_M), RESIDUAL_GAIN (make-model's; lower:
#   the draft agrees more; the pair's folder is named after it), SPEC_NS
#   ("2 3 4 5 6 7 8" for the sweep), SPEC_ONLY=1 (skip the decode/pass benches:
#   a second pair in the same call needs only the speculative rows).
#   DRAFT_PRESET (e.g. qwen3-0.6b: an independent draft of that shape instead
#   of a derived one) with SUCCESSOR_GAIN (make-model --successor-gain: the
#   pair's shared next-token structure; ~15-20 for a few disagreements in
#   five; calibrate with the acceptance it prints).
# Files under $OUT (the device tool returns <= 8): harness.log (stages and
# timings), llama.log, specd.log (every command and its output),
# llama_bench.jsonl, specd_bench.jsonl, table.md.
#
# On the device (the lead):
#   tests/gpu/pack_peer.sh                # here, once: .peer/llama-cuda.tar.xz
#   tests/gpu/make_carry.sh && tar -cJf .devpack/devcarry.tar.xz .devcarry/bin/specd .devcarry/lib
#   run(command="bash tests/gpu/peer_bench.sh", carry=[".devpack", ".peer"], timeout_s=600)
# Dry run here (CPU backend, a small model; exercises every stage and the
# table): PEER_DRY=1 SPECD_BIN=build/cli/specd LLAMA_BIN=/work/peer/lcb/bin \
#   bash tests/gpu/peer_bench.sh
set -u
OUT=${OUT:-/tmp/peer_out}
mkdir -p "$OUT"
root=$(pwd)
T0=$(date +%s)
BUDGET=${PEER_BUDGET_S:-540}
LOG=$OUT/harness.log
LL=$OUT/llama.log
SL=$OUT/specd.log
LBJ=$OUT/llama_bench.jsonl
SBJ=$OUT/specd_bench.jsonl
: > "$LOG"; : > "$LL"; : > "$SL"; : > "$LBJ"; : > "$SBJ"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

stamp() { echo "== [$(( $(date +%s) - T0 )) s] $*" | tee -a "$LOG"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
# run LOGFILE TIMEOUT TAG CMD...: CMD under `timeout`, capped by what is left
# of the budget; its output is appended to LOGFILE between "### TAG" lines
# (peer_table.py finds sections by them). STDOUT=FILE sends stdout there.
run() {
  local log=$1 t=$2 tag=$3
  shift 3
  local l s rc
  l=$(left)
  if [ "$l" -lt 20 ]; then
    echo "### $tag skipped: $l s of the budget left" | tee -a "$log" >> "$LOG"
    return 124
  fi
  [ "$t" -gt $((l - 10)) ] && t=$((l - 10))
  { echo "### $tag"; printf '$'; printf ' %q' "$@"; echo; } >> "$log"
  s=$(date +%s)
  if [ -n "${STDOUT:-}" ]; then
    timeout -k 5 "$t" "$@" >> "$STDOUT" 2>> "$log"
  else
    timeout -k 5 "$t" "$@" >> "$log" 2>&1
  fi
  rc=$?
  echo "### end $tag rc=$rc $(( $(date +%s) - s )) s" >> "$log"
  stamp "$tag: rc=$rc, $(( $(date +%s) - s )) s"
  return $rc
}

if [ "${PEER_DRY:-0}" = 1 ]; then
  MM=(--preset tiny-qwen3 --layers 4 --d-model 256 --ffn 512 --vocab-size 2048)
  NAME=dry-qwen3; TYPE=Q4_K_S; DLAYERS=2; DTYPE=Q4_K_M
  BACKEND=cpu; NGL=0; DEPTH=256; NTOK=32; REPS=1; SREPS=3
else
  MM=(--preset qwen3-27b)
  NAME=qwen3-27b; TYPE=Q4_K_S; DLAYERS=${DRAFT_LAYERS:-6}; DTYPE=${DRAFT_TYPE:-Q4_K_M}
  BACKEND=cuda; NGL=99; DEPTH=4096; NTOK=256; REPS=3; SREPS=10
fi
PROMPT="The history of the city begins with a small harbour where fishermen"
SPEC_NS=${SPEC_NS:-3 6}
SPEC_ONLY=${SPEC_ONLY:-0}
GAIN=${RESIDUAL_GAIN:-}
if [ -n "$GAIN" ]; then
  MM+=(--residual-gain "$GAIN")
  NAME=$NAME-g$GAIN
fi
DRAFTPART=d$DLAYERS
if [ -n "${DRAFT_PRESET:-}" ]; then
  MM+=(--draft-preset "$DRAFT_PRESET")
  DRAFTPART=$DRAFT_PRESET
fi
if [ -n "${SUCCESSOR_GAIN:-}" ]; then
  MM+=(--successor-gain "$SUCCESSOR_GAIN")
  NAME=$NAME-s$SUCCESSOR_GAIN
fi
stamp "peer_bench: $NAME $TYPE pair (draft: $DLAYERS layers $DTYPE), backend $BACKEND, depth $DEPTH, $NTOK tokens"
{ uname -a; nproc; free -g | head -2; df -h /tmp | tail -1; } >> "$LOG" 2>&1
command -v nvidia-smi > /dev/null &&
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv >> "$LOG" 2>&1

# ---- llama.cpp ----
P=${PEER_DIR:-/tmp/peer}  # where llama.cpp is unpacked or built
L=""
if [ -n "${LLAMA_BIN:-}" ]; then
  L=$LLAMA_BIN
  export LD_LIBRARY_PATH="$L:${LD_LIBRARY_PATH:-}"
elif [ -x "$P/llama-cuda/bin/llama-bench" ] || { [ -f .peer/llama-cuda.tar.xz ] && mkdir -p "$P" &&
                                               tar -C "$P" -xJf .peer/llama-cuda.tar.xz; }; then
  L="$P/llama-cuda/bin"
  # ggml-cuda links NCCL; the device has it in its Python nvidia-nccl package.
  nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  export LD_LIBRARY_PATH="$P/llama-cuda/lib:/usr/local/cuda/lib64:${nccl:+$nccl:}${LD_LIBRARY_PATH:-}"
elif [ -x "$P/lcb/bin/llama-bench" ] || [ -f .peer/llama.cpp-b0.3.36-cuda-src.tar.xz ]; then
  if [ ! -x "$P/lcb/bin/llama-bench" ]; then
    stamp "building llama.cpp from .peer/llama.cpp-b0.3.36-cuda-src.tar.xz (no packed build carried)"
    mkdir -p "$P" && tar -C "$P" -xJf .peer/llama.cpp-b0.3.36-cuda-src.tar.xz
    for d in app pocs examples/training examples/sycl; do
      mkdir -p "$P/llama.cpp/$d"; touch "$P/llama.cpp/$d/CMakeLists.txt"
    done
    export PATH="/usr/local/cuda/bin:$PATH"
    run "$LOG" 60 llama-configure cmake -S "$P/llama.cpp" -B "$P/lcb" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release
    run "$LOG" 480 llama-build cmake --build "$P/lcb" -j"$(nproc)" --target llama-bench llama-speculative-simple \
      llama-completion
    # Back to the caller, to carry next time instead of building.
    [ -x "$P/lcb/bin/llama-bench" ] && bash tests/gpu/pack_peer.sh "$P/lcb" >> "$LOG" 2>&1 &&
      cp .peer/llama-cuda.tar.xz "$OUT/"
  fi
  L="$P/lcb/bin"
  export LD_LIBRARY_PATH="$L:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
fi
if [ -z "$L" ] || [ ! -x "$L/llama-bench" ]; then
  stamp "no llama.cpp: carry .peer/llama-cuda.tar.xz or .peer/llama.cpp-b0.3.36-cuda-src.tar.xz, or set LLAMA_BIN"
  L=""
fi

# ---- specd ----
S=${SPECD_BIN:-}
if [ -z "$S" ]; then
  [ -d .devcarry ] || { [ -f .devpack/devcarry.tar.xz ] && tar -xJf .devpack/devcarry.tar.xz; }
  S=$root/.devcarry/bin/specd
  export LD_LIBRARY_PATH="$root/.devcarry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
fi
if ! "$S" --help > /dev/null 2>&1; then
  stamp "specd does not start ($S): carry .devpack/devcarry.tar.xz or set SPECD_BIN"
  ldd "$S" 2>&1 | grep -i "not found" >> "$LOG"
  S=""
fi

# ---- the pair ----
M=/tmp/peer_models/$NAME-$TYPE-$DRAFTPART-$DTYPE
T=$M/target.gguf
D=$M/draft.gguf
if [ -n "$S" ] && { [ ! -f "$T" ] || [ ! -f "$D" ]; }; then
  run "$SL" 300 make-model "$S" make-model "${MM[@]}" --type $TYPE --fill blocks --sync=false --pair \
    --draft-layers $DLAYERS --draft-type $DTYPE --out "$M"
elif [ -f "$M/make-model.seconds" ]; then
  # Made before this run (device_lib's make_pair, the same command): its time, for the table.
  { echo "### make-model (before this run: device_lib.sh make_pair)"
    echo "### end make-model rc=0 $(cat "$M/make-model.seconds") s"; } >> "$SL"
fi
ls -la "$M" >> "$LOG" 2>&1
if [ ! -f "$T" ] || [ ! -f "$D" ]; then
  stamp "no model pair in $M: nothing to measure"
  L=""
  S=""
fi

# ---- llama.cpp figures ----
if [ -n "$L" ]; then
  if [ "$SPEC_ONLY" != 1 ]; then
    pp=2,3,4,5,6,7,8,9
    STDOUT=$LBJ run "$LL" 150 llama-bench-target "$L/llama-bench" -m "$T" -ngl $NGL -fa 1 -p $pp,128,512 -n 128 \
      -d 0,$DEPTH -r $REPS -o jsonl
    STDOUT=$LBJ run "$LL" 60 llama-bench-draft "$L/llama-bench" -m "$D" -ngl $NGL -fa 1 -p 0 -n 128 -r $REPS -o jsonl
    run "$LL" 90 llama-completion "$L/llama-completion" -m "$T" -ngl $NGL -fa on -c 2048 -n $NTOK --temp 0 \
      --ignore-eos -no-cnv --no-display-prompt -p "$PROMPT"
    run "$LL" 60 llama-completion-draft "$L/llama-completion" -m "$D" -ngl $NGL -fa on -c 2048 -n $NTOK --temp 0 \
      --ignore-eos -no-cnv --no-display-prompt -p "$PROMPT"
  fi
  for n in $SPEC_NS; do
    run "$LL" 120 "llama-spec-n$n" "$L/llama-speculative-simple" -m "$T" -md "$D" -ngl $NGL -ngld $NGL -fa on \
      -c 2048 -n $NTOK --temp 0 --top-k 1 --ignore-eos --spec-type draft-simple --spec-draft-n-max $n \
      --spec-draft-n-min 0 --spec-draft-p-min 0 -p "$PROMPT"
  done
fi

# ---- specd figures ----
if [ -n "$S" ]; then
  G=(--backend "$BACKEND")
  bench() {  # bench TAG TIMEOUT ARGS...: specd bench, its JSON appended to $SBJ as {"tag":..,"result":..}
    local tag=$1 t=$2
    shift 2
    rm -f "$TMP/b.json"
    run "$SL" "$t" "$tag" "$S" bench "${G[@]}" --reps $SREPS --json "$TMP/b.json" "$@" &&
      [ -s "$TMP/b.json" ] && printf '{"tag":"%s","result":%s}\n' "$tag" "$(cat "$TMP/b.json")" >> "$SBJ"
  }
  GEN=("$S" generate "${G[@]}" --max-seqs 1 --max-seq-len 2048 --max-tokens "$NTOK" --ignore-eos --prompt "$PROMPT")
  if [ "$SPEC_ONLY" != 1 ]; then
    bench specd-bench-target-ctx64 120 --model "$T" --ctx 64 --prefill 128 --batches 1 --verify-k 1
    bench specd-bench-target-depth 150 --model "$T" --ctx $DEPTH --prefill 512 --batches 1 --verify-k 1,2,3,4,5,6,7,8
    bench specd-bench-draft 60 --model "$D" --ctx 64 --prefill 64 --batches 1 --verify-k 1
    run "$SL" 90 specd-generate "${GEN[@]}" --model "$T"
    run "$SL" 60 specd-generate-draft "${GEN[@]}" --model "$D"
  fi
  for n in $SPEC_NS; do
    run "$SL" 120 "specd-spec-k$n" "${GEN[@]}" --model "$T" --draft "$D" --k "$n"
  done
  run "$SL" 120 specd-spec-adaptive "${GEN[@]}" --model "$T" --draft "$D"
fi

# ---- the table ----
stamp "table"
python3 tests/gpu/peer_table.py --llama-log "$LL" --specd-log "$SL" --llama-bench "$LBJ" --specd-bench "$SBJ" \
  --depth $DEPTH --ntok $NTOK > "$OUT/table.md" 2>> "$LOG"
rc=$?
cat "$OUT/table.md"
stamp "done (table rc=$rc)"
exit $rc
