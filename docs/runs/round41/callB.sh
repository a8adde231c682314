#!/usr/bin/env bash
# Round 41 call B: six streams through the three services (round 40's callS.sh), the wgmma wide matvec against
# HEAD before it (the pack's alt/bin): target-only once (this tree), k = 4, adaptive and HEAD's adaptive
# alternating (REPS_ADAPTIVE / ALT_REPS runs), each in fresh services.
#   run(command="bash docs/runs/round41/callB.sh", carry=[".devpackW41"])   (~5 min)
set -u
export DEVPACK=${DEVPACK:-.devpackW41/devcarry.tar.xz}
KS=${KS:-4} REPS_ADAPTIVE=${REPS_ADAPTIVE:-2} ALT_REPS=${ALT_REPS:-2} SIX_BEFORE=${SIX_BEFORE:-420} \
  bash docs/runs/round40/callS.sh
