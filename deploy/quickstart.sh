#!/usr/bin/env bash
# The README's first command: builds specd (installing the Debian packages it
# needs), starts the three services on loopback with a generated demo model
# pair (or yours), answers one request through the gRPC API, prints the
# answer and the service's statistics, and stops the services.
#
#   deploy/quickstart.sh                     demo pair (generated, nothing downloaded)
#   deploy/quickstart.sh TARGET.gguf DRAFT.gguf
#
# Environment: BUILD_DIR (default build), PROMPT, MAX_TOKENS, SKIP_BUILD=1
# (use the binaries already in BUILD_DIR), KEEP=1 (keep the work directory
# with the logs).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
PROMPT=${PROMPT:-Once upon a time}
MAX_TOKENS=${MAX_TOKENS:-64}

if [ $# -ne 0 ] && [ $# -ne 2 ]; then
  echo "usage: $0 [TARGET.gguf DRAFT.gguf]" >&2
  exit 2
fi

bins=("$BUILD_DIR/cli/specd" "$BUILD_DIR/coordinator/specd-coordinator"
      "$BUILD_DIR/draft_worker/specd-draft-worker" "$BUILD_DIR/target_worker/specd-target-worker")
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  deploy/install-deps.sh
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
  echo "== generating a demo model pair (target + derived draft)"
  "$SPECD" make-model --preset small --pair --out "$work/models"
  target=$work/models/target.gguf
  draft=$work/models/draft.gguf
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
tp=$(free_port); dp=$(free_port); cp=$(free_port)
while [ "$dp" = "$tp" ]; do dp=$(free_port); done
while [ "$cp" = "$tp" ] || [ "$cp" = "$dp" ]; do cp=$(free_port); done
coordinator=127.0.0.1:$cp

echo "== starting the target worker (127.0.0.1:$tp), the draft worker (127.0.0.1:$dp) and the coordinator ($coordinator)"
"$BUILD_DIR/target_worker/specd-target-worker" --model "$target" --listen "127.0.0.1:$tp" --max-seqs 4 \
  >"$work/target.log" 2>&1 &
pids+=($!)
"$BUILD_DIR/draft_worker/specd-draft-worker" --model "$draft" --listen "127.0.0.1:$dp" --max-seqs 4 \
  >"$work/draft.log" 2>&1 &
pids+=($!)
"$BUILD_DIR/coordinator/specd-coordinator" --listen "$coordinator" --target "127.0.0.1:$tp" \
  --draft "127.0.0.1:$dp" >"$work/coordinator.log" 2>&1 &
pids+=($!)

echo "== waiting for the service to be healthy"
ok=0
for _ in $(seq 1 120); do
  for p in "${pids[@]}"; do
    kill -0 "$p" 2>/dev/null || { echo "quickstart: a service exited during start-up" >&2; exit 1; }
  done
  if "$SPECD" stats --coordinator "$coordinator" 2>/dev/null | grep -q "draft ready"; then ok=1; break; fi
  sleep 0.5
done
[ "$ok" = 1 ] || { echo "quickstart: the service did not become healthy within 60 s" >&2; exit 1; }

echo "== one request through the gRPC API: \"$PROMPT\""
"$SPECD" generate --coordinator "$coordinator" --prompt "$PROMPT" --max-tokens "$MAX_TOKENS"

echo "== service statistics"
"$SPECD" stats --coordinator "$coordinator"
echo "== done: three processes, one answer over gRPC"
