#!/usr/bin/env bash
# Round 32 call H: issue 12's six streams through the three services, the wide kernel's stages on a 128-byte
# line (new, round 31's next-wide-align.patch) against this tree (base); round 17's cohort script, k4 then
# adaptive, one run each.
#   run(command="bash docs/runs/round32/callH.sh", carry=[".devpackH32"])   (pack-h.sh builds it)
set -u
export DEVPACK=.devpackH32/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
SETS="base new" MODES="k4 adaptive" REPS=1 OUT=$O bash docs/runs/round17/callCohort.sh 2>&1 | grep -vE "^NVIDIA"
stamp done
bundle_out
