# The three processes on loopback, for the device scripts (sourced, not run):
# tests/gpu/ipc_device_check.sh and tests/gpu/batch_spec.sh.
# The caller sets C (bin/ of the binaries), S (specd), OUT, TP, DP (worker
# ports) and CO (coordinator address); SVC_FLAGS go to both workers,
# SVC_TARGET_FLAGS / SVC_DRAFT_FLAGS to one, SVC_READY_S bounds the wait;
# SVC_UNIX=1 puts the workers on unix sockets in $OUT (TP, DP unused).
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2> /dev/null; done
  pids=()
}
trap stop_all EXIT

# Whether a started process has exited (a library missing, a bad flag): the
# start fails then instead of waiting out SVC_READY_S (round 38).
svc_dead() {
  local p
  for p in "${pids[@]}"; do kill -0 "$p" 2> /dev/null || return 0; done
  return 1
}

# svc_start TAG TARGET DRAFT [coordinator flags...]: logs $OUT/TAG.{target,
# draft,coord}.log; starts the draft once the target serves; waits for
# "draft ready" in `specd stats` (1 and the log tails when it does not come
# or a process exits).
svc_start() {
  local tag=$1 target=$2 draft=$3; shift 3
  local ta=127.0.0.1:$TP da=127.0.0.1:$DP
  if [ "${SVC_UNIX:-0}" = 1 ]; then  # the workers on unix sockets instead of loopback TCP
    ta=unix:$OUT/$tag.target.sock
    da=unix:$OUT/$tag.draft.sock
  fi
  # shellcheck disable=SC2086
  "$C/bin/specd-target-worker" --model "$target" --listen "$ta" ${SVC_FLAGS:-} ${SVC_TARGET_FLAGS:-} \
    > "$OUT/$tag.target.log" 2>&1 &
  pids+=($!)
  # The draft after the target serves: a derived draft maps the target's
  # weights (CUDA IPC) only when the target exports them before it loads.
  for _ in $(seq 1 $((2 * ${SVC_READY_S:-60}))); do
    grep -q "msg=serving" "$OUT/$tag.target.log" 2> /dev/null && break
    svc_dead && break
    sleep 0.5
  done
  if svc_dead; then
    echo "   the target worker exited; its log tail:"
    tail -n 5 "$OUT/$tag.target.log"
    return 1
  fi
  # shellcheck disable=SC2086
  "$C/bin/specd-draft-worker" --model "$draft" --listen "$da" ${SVC_FLAGS:-} ${SVC_DRAFT_FLAGS:-} \
    > "$OUT/$tag.draft.log" 2>&1 &
  pids+=($!)
  "$C/bin/specd-coordinator" --target "$ta" --draft "$da" --listen "$CO" "$@" \
    > "$OUT/$tag.coord.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 $((2 * ${SVC_READY_S:-60}))); do
    "$S" stats --coordinator "$CO" 2> /dev/null | grep -q "draft ready" && return 0
    svc_dead && break
    sleep 0.5
  done
  echo "   services did not become ready$(svc_dead && echo " (a process exited)"); log tails:"
  tail -n 5 "$OUT/$tag.target.log" "$OUT/$tag.draft.log" "$OUT/$tag.coord.log"
  return 1
}
