#!/usr/bin/env bash
# Prepared for the next device session (not run): issue 12's six streams through the three services,
# this tree ("base") against the wide matvec ("new": next-mmv-wide.patch), target-only then speculation
# at k = 4 and adaptive on the ~80% pair (round 17's cohort call: tests/gpu/batch_spec.sh, TOKENS=256,
# lockstep). The six-sequence verify of 30 columns is one wide pass instead of two 16-column ones; the
# workers' stats lines now count prefill slices that ran ahead of a waiting batch (7d476a0).
# Pack: bash docs/runs/round26/next-pack-s.sh (after next-pack-w.sh, which it does not disturb), then
#   run(command="bash docs/runs/round26/next-callS.sh", carry=[".devpackS"])
export DEVPACK=.devpackS/devcarry.tar.xz
SETS="base new" MODES="k4 adaptive" exec bash "$(dirname "$0")/../round17/callCohort.sh"
