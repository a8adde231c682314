#!/usr/bin/env bash
# Round 16, issue 12 ("adaptive k within 3% of the best fixed k"), branch adaptive-batch-cost: six
# concurrent streams through the three services (tests/gpu/batch_spec.sh, TOKENS=256, lockstep on) on the
# ~80% pair (make-model --residual-gain 0.05, as round 15's call G), with the build whose cost cells key a
# shared call at its batch's length per member: a verify forward at its drafts per member, a batched
# proposal at the forwards it ran (its longest member's). Measures, per mode, the aggregate output tok/s of
# target-only (batch_spec's "off" run, so once per mode) and of speculation: the default adaptive policy
# and fixed --k 4 --no-adaptive; then adaptive / k4 (the issue's bar: >= 0.97). Keeps each run's
# `specd stats` (the step cost cells: they should now rise with k, verify[1..8] and draft[1..8]; the k
# histogram; the step time taken apart) in $O/stats/, the logs in $O/r16adaptive.tgz.
# Needs all four binaries of this branch (CUDA, sm_90): tests/gpu/make_carry.sh, then
#   mkdir -p .devpack && tar -cJf .devpack/devcarry.tar.xz .devcarry
#   run(command="bash docs/runs/round16/callAdaptive.sh", carry=[".devpack"])
# REPS (1) repeats the pair of modes (adaptive first, then k4); call G's runs took ~50 s a mode.
set -u
. tests/gpu/device_lib.sh
device_setup
make_pair "$M8" --residual-gain 0.05
mkdir -p "$O/stats"
summary=()
runs=()
for rep in $(seq "${REPS:-1}"); do
  for mode in adaptive k4; do
    flags=""
    [ $mode = k4 ] && flags="--k 4 --no-adaptive"
    tag=s6$mode.$rep
    runs+=("$tag")
    stamp "six streams through the services, $mode (rep $rep), ~80% pair"
    OUT=$O/$tag TARGET=$M8/target.gguf DRAFT=$M8/draft.gguf TOKENS=256 SPEC_FLAGS="$flags" timeout 200 \
      bash tests/gpu/batch_spec.sh > "$O/$tag.txt" 2>&1
    echo "rc=$?"
    tail -n 14 "$O/$tag.txt"
    for s in on off; do cp "$O/$tag/$s.stats.txt" "$O/stats/$tag.$s.stats.txt" 2> /dev/null; done
    grep -hE "^(k histogram|step costs)" "$O/$tag/on.stats.txt" 2> /dev/null | sed "s/^/$mode: /"
    summary+=("$mode $rep $(table_tps target-only "$O/$tag.txt") $(table_tps "speculative (${flags:-adaptive})" "$O/$tag.txt")")
  done
done
tar -czf "$O/r16adaptive.tgz" -C "$O" "${runs[@]}" 2> /dev/null
for r in "${runs[@]}"; do rm -rf "${O:?}/$r"; done
stamp "summary (aggregate output tok/s)"
printf '%s\n' "${summary[@]}" | python3 -c '
import sys
spec = {}
for r in (l.split() for l in sys.stdin if l.strip()):
    if len(r) < 4:
        print(" ".join(r), "(incomplete)")
        continue
    print(f"{r[0]:8s} rep {r[1]}: target-only {r[2]}, speculative {r[3]} ({float(r[3]) / float(r[2]):.2f}x)")
    spec.setdefault(r[0], []).append(float(r[3]))
if spec.get("adaptive") and spec.get("k4"):
    a, k = (sum(v) / len(v) for v in (spec["adaptive"], spec["k4"]))
    print(f"adaptive / k4 = {a:.1f} / {k:.1f} = {a / k:.3f} (issue 12: >= 0.97)")
'
stamp "done"
