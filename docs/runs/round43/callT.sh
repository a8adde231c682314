#!/usr/bin/env bash
# Round 43's next call (not run: no device time left): which batch shapes run cold in six streams, and whether
# drafting into a reserved tail slack keeps them warm. A k = 4 run (call G) had 151 of the target's 1242 forwards
# cold and its steps' verify averaged 17.6 ms against the 30-token cell's warm 16.8 (the draft 8.05 against 6.96
# for six members): ~2 ms a step, 7%, the size of the gap between 1.42x and issue 12's 1.5x. One suspect: a
# request's last steps cut its drafts to what can be output (`limit = remaining - 1`), so the cohort's verify
# takes a new shape (26-29 tokens for six members, ...) whenever a member nears its end. `tail-slack.patch`
# (coordinator: a lockstep member drafts up to k past max_tokens, its KV reserved at admission; output unchanged;
# test SpecLoopTest.InLockstepTheLastStepsDraftIntoTheTailSlack) is `specd-coordinator.slack` in the pack.
#  1. target-only, then k = 4 tree / slack alternating, twice (first: a short budget may cut the call);
#  2. six streams k = 4 with the workers at --log-level debug, the tree's coordinator, then the slack one: every
#     eager first run and capture counted by shape and reason (graph_shapes).
#   pack: .devpackF43's files + `specd-coordinator.slack` (f410cd7 with tail-slack.patch):
#         mkdir -p .devpackT43; XZ_OPT=-9 tar -cJf .devpackT43/devcarry.tar.xz .devcarry
#   run(command="bash docs/runs/round43/callT.sh", carry=[".devpackT43"])   (~4 min)
set -u
export DEVPACK=${DEVPACK:-.devpackT43/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
work_under /tmp/callT  # a snapshot into $OUT after each run: a call cut short still returns what ran
exec > >(tee "$O/stdout.txt") 2>&1
cp "$C/bin/specd-coordinator" "$C/bin/specd-coordinator.tree"
coordinator() { cp "$C/bin/specd-coordinator.$1" "$C/bin/specd-coordinator"; }
# The A/B first (a session's last device minutes may cut the call short).
coordinator tree
six_streams off 0
snap
for rep in 1 2; do
  for v in tree slack; do
    before 300 "k = 4 $v rep $rep" || break 2
    coordinator $v
    six_streams "k4.$v.$rep" 4
    snap
  done
done
for v in tree slack; do
  before 420 "the cold shapes with the $v coordinator" || break
  coordinator $v
  six_streams "k4.$v.dbg" 4 "--log-level debug"
  for w in target draft; do
    graph_shapes "$O/six/k4.$v.dbg/on.$w.log"
    xz -9 "$O/six/k4.$v.dbg/on.$w.log"
  done
  snap
done
stamp done
snap
