#!/usr/bin/env bash
# Round 44's prepared call (not run: every start failed this session). Six streams on the ~80% pair, k = 4,
# four coordinators on the same workers (round 43's, pack .devpackT43) alternating twice after one target-only run:
#   tree          round 43's coordinator (f410cd7)
#   slack         the same with tail-slack.patch (a lockstep cohort's last steps draft into reserved KV)
#   beside        e136a1f: the draft prefills a new request's prompt beside the target's prefill, so its first
#                 step drafts with the cohort instead of opening the draft alone
#   beside-slack  e136a1f with the tail slack (branch tail-slack, gated on the target preparing shapes)
# Aggregate tok/s, time to first token (loadgen's p50 / p90) and the step anatomy of each run; 0 mismatches.
# Then, as time allows, the cold shapes of a beside-slack run (workers at --log-level debug).
#   packs: .devpackT43 (round 43: workers, specd, the tree and slack coordinators) and .devpackU44/bin (the
#          beside coordinators, stripped: `strip -o .devpackU44/bin/specd-coordinator.beside
#          build-cuda/coordinator/specd-coordinator` at e136a1f, and at e136a1f + the tail-slack commit)
#   run(command="bash docs/runs/round44/callU.sh", carry=[".devpackT43", ".devpackU44"])   (~5 min)
set -u
export DEVPACK=${DEVPACK:-.devpackT43/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
cp .devpackU44/bin/* "$C/bin/"
work_under /tmp/callU  # a snapshot into $OUT after each run: a call cut short still returns what ran
exec > >(tee "$O/stdout.txt") 2>&1
cp "$C/bin/specd-coordinator" "$C/bin/specd-coordinator.tree"
coordinator() { cp "$C/bin/specd-coordinator.$1" "$C/bin/specd-coordinator"; }
ttft() { grep -E "time to first token" "$O/six/$1/on.loadgen.log" 2> /dev/null | tr -s ' ' | cut -c1-120; }
coordinator tree
six_streams off 0
snap
for rep in 1 2; do
  for v in tree beside slack beside-slack; do
    before 480 "k = 4 $v rep $rep" || break 2
    coordinator $v
    six_streams "k4.$v.$rep" 4
    ttft "k4.$v.$rep"
    snap
  done
done
if before 470 "the cold shapes of beside-slack"; then
  coordinator beside-slack
  six_streams k4.dbg 4 "--log-level debug"
  for w in target draft; do
    graph_shapes "$O/six/k4.dbg/on.$w.log"
    xz -9 "$O/six/k4.dbg/on.$w.log"
  done
fi
stamp done
snap
