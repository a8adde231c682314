#!/usr/bin/env bash
# Round 25 call C: issue 12's six streams through the three services with this tree (1099e5a: the
# 30-column verify 5% faster), round 17's cohort call with this tree's binaries only: target-only, then
# speculation at k = 4 and adaptive, on the ~80% pair (tests/gpu/batch_spec.sh, TOKENS=256, lockstep).
# Pack: BUILD_DIR=build-cuda CARRY_MODELS=0 tests/gpu/make_carry.sh;
#   mkdir -p .devpackG; XZ_OPT=-9 tar -cJf .devpackG/devcarry.tar.xz .devcarry
# then run(command="bash docs/runs/round25/callC.sh", carry=[".devpackG"])
export DEVPACK=.devpackG/devcarry.tar.xz
SETS=new MODES="k4 adaptive" exec bash "$(dirname "$0")/../round17/callCohort.sh"
