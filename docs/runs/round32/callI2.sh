#!/usr/bin/env bash
# Round 32 call I2: issue 12's six streams through the three services at k = 4 (MODES="k4 adaptive" adds the
# adaptive policy, ~1.5 min more), this tree (new: the quantized prompt GEMM, its stats splitting others'
# prefill from the wait) against round 31's binaries (base, 616ae2f; SETS="new": the tree alone); round 17's
# cohort script, one run each.
#   run(command="bash docs/runs/round32/callI2.sh", carry=[".devpackI32"])   (pack-i.sh builds it)
set -u
export DEVPACK=${DEVPACK:-.devpackI32/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
SETS="${SETS:-base new}" MODES="${MODES:-k4}" REPS=1 OUT=$O bash docs/runs/round17/callCohort.sh 2>&1 | grep -vE "^NVIDIA"
stamp done
bundle_out
