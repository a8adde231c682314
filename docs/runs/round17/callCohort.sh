#!/usr/bin/env bash
# Round 17, issue 12 ("6 concurrent speculative streams >= 1.5x 6 target-only"; "adaptive within 3% of
# the best fixed k"): six streams through the three services (tests/gpu/batch_spec.sh, TOKENS=256,
# lockstep on) on the ~80% pair (make-model --residual-gain 0.05, as rounds 15-16), round 16's
# binaries (.devcarry/base, c5c3c13) against this round's (.devcarry: lockstep cohorts, cold forwards
# out of the cost cells, workers' gRPC pollers, batches in a canonical order), alternating; "unix": this round's with the workers on
# unix sockets (SVC_UNIX=1, as the deploy/ configs). Each batch_spec run measures target-only ("off") then
# speculation ("on"): --k 4 --no-adaptive, then the default adaptive. Prints per run the aggregate
# tok/s, the workers' stats lines (new binaries: cold forwards, cohort batches / started short);
# then the means. Keeps each run's `specd stats` in $O/stats/, the logs in $O/r17cohort.tgz.
# Needs both binary sets (CUDA, sm_90): .devcarry/bin (specd + the three services, this tree) and
# .devcarry/base/bin (the same four from c5c3c13), packed with
#   XZ_OPT=-6 tar -cJf .devpack/devcarry.tar.xz .devcarry
#   run(command="bash docs/runs/round17/callCohort.sh", carry=[".devpack"])
# SETS ("base new unix"), MODES ("k4 adaptive"), REPS (1): a run took ~50 s in round 16.
# Round 18 adds the set "nobatch": this tree's binaries with the coordinator's --batch-calls=false
# (each request's calls sent alone, as round 17): SETS="base nobatch new" measures rounds 16 / 17 / 18.
# Round 36 adds "nowarm": this tree's binaries with the coordinator's --warmup=off.
set -u
. tests/gpu/device_lib.sh
device_setup
[ -d "$C/base/lib" ] || ln -s ../lib "$C/base/lib"
make_pair "$M8" --residual-gain 0.05
mkdir -p "$O/stats"
summary=()
runs=()
for rep in $(seq "${REPS:-1}"); do
  for mode in ${MODES:-k4 adaptive}; do
    flags=""
    [ "$mode" = k4 ] && flags="--k 4 --no-adaptive"
    for set in ${SETS:-base new unix}; do
      carry=$C unix=0 coord=""
      [ "$set" = base ] && carry=$C/base
      [ "$set" = unix ] && unix=1
      [ "$set" = nobatch ] && coord="--batch-calls=false"
      [ "$set" = nowarm ] && coord="--warmup=off"
      tag=s6$mode.$set.$rep
      runs+=("$tag")
      stamp "six streams through the services, $mode, $set binaries (rep $rep), ~80% pair"
      OUT=$O/$tag CARRY=$carry SVC_UNIX=$unix COORD_FLAGS="$coord" TARGET=$M8/target.gguf DRAFT=$M8/draft.gguf TOKENS=256 SPEC_FLAGS="$flags" \
        timeout 200 bash tests/gpu/batch_spec.sh > "$O/$tag.txt" 2>&1
      echo "rc=$?"
      tail -n 8 "$O/$tag.txt"
      for s in on off; do
        cp "$O/$tag/$s.stats.txt" "$O/stats/$tag.$s.stats.txt" 2> /dev/null
        grep -hE "^(target|draft):.*forwards" "$O/$tag/$s.stats.txt" 2> /dev/null | sed "s/^/$s: /"
      done
      grep -hE "^(k histogram|step costs|lockstep)" "$O/$tag/on.stats.txt" 2> /dev/null | sed "s/^/$mode: /"
      summary+=("$mode $set $rep $(table_tps target-only "$O/$tag.txt") $(table_tps "speculative (${flags:-adaptive})" "$O/$tag.txt")")
    done
  done
done
tar -czf "$O/r17cohort.tgz" -C "$O" "${runs[@]}" 2> /dev/null
for r in "${runs[@]}"; do rm -rf "${O:?}/$r"; done
stamp "summary (aggregate output tok/s)"
printf '%s\n' "${summary[@]}" | python3 -c '
import sys
from collections import defaultdict
off, on = defaultdict(list), defaultdict(list)
for r in (l.split() for l in sys.stdin if l.strip()):
    if len(r) < 5:
        print(" ".join(r), "(incomplete)")
        continue
    mode, s, rep, t, v = r[0], r[1], r[2], float(r[3]), float(r[4])
    print(f"{mode:8s} {s:7s} rep {rep}: target-only {t:.1f}, speculative {v:.1f} ({v / t:.2f}x)")
    off[s].append(t)
    on[(mode, s)].append(v)
mean = lambda v: sum(v) / len(v)
for s in sorted(off):
    line = f"{s}: target-only mean {mean(off[s]):.1f}"
    for mode in ("k4", "adaptive"):
        if on.get((mode, s)):
            line += f", {mode} {mean(on[(mode, s)]):.1f} ({mean(on[(mode, s)]) / mean(off[s]):.2f}x)"
    if on.get(("k4", s)) and on.get(("adaptive", s)):
        a, k = mean(on[("adaptive", s)]), mean(on[("k4", s)])
        line += f"; adaptive / k4 = {a / k:.3f}"
    print(line)
'
stamp "done"
