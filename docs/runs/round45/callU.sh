#!/usr/bin/env bash
# Round 45's six-stream A/B (round 44's callU, its packs rebuilt in a new workspace). Six streams on the ~80% pair,
# k = 4, four coordinators on the same workers alternating twice after one target-only run:
#   tree          this tree without e136a1f..7c2a28e (the draft opens after the target's prefill, alone)
#   beside        this tree (the draft prefills beside the target's prefill)
#   slack         tree + the tail slack (a lockstep cohort's last steps draft into reserved KV past max_tokens)
#   beside-slack  this tree + the tail slack (branch tail-slack)
# Aggregate tok/s, time to first token (loadgen's p50 / p90), step anatomy; 0 mismatches. Then the draft's
# forward alone at 1, 4 and 6 sequences (specd bench, pinned logits) and the cold shapes of beside-slack.
#   pack: .devpackU45 (tests/gpu/make_carry.sh with the services and specd, the coordinators added as
#         .devcarry/bin/specd-coordinator.TAG; docs/runs/round45/README.md)
#   run(command="bash docs/runs/round45/callU.sh", carry=[".devpackU45"])   (~6 min)
set -u
export DEVPACK=${DEVPACK:-.devpackU45/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
work_under /tmp/callU  # a snapshot into $OUT after each run: a call cut short still returns what ran
exec > >(tee "$O/stdout.txt") 2>&1
coordinator() { cp "$C/bin/specd-coordinator.$1" "$C/bin/specd-coordinator"; }
ttft() { grep -E "time to first token" "$O/six/$1/on.loadgen.log" 2> /dev/null | tr -s ' ' | cut -c1-120; }
coordinator tree
six_streams off 0
snap
for rep in 1 2; do
  for v in tree beside slack beside-slack; do
    before 450 "k = 4 $v rep $rep" || break 2
    coordinator $v
    six_streams "k4.$v.$rep" 4
    ttft "k4.$v.$rep"
    snap
  done
done
if before 500 "the draft's forward"; then
  stamp "the draft's forward, 1 / 4 / 6 sequences at 384, and six sequences of 2 tokens"
  timeout 60 "$C/bin/specd" bench --backend cuda --model "$M8/draft.gguf" --batches 1,4,6 --verify-k 1 \
    --verify-seqs 6 --ctx 384 --prefill 64 --reps 20 2>&1 | tail -20
  snap
fi
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
