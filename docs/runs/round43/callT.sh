#!/usr/bin/env bash
# Round 43's next diagnostic (not run: no device time left): which batch shapes run cold in six streams. A k = 4
# run (call G) had 151 of the target's 1242 forwards cold and its steps' verify averaged 17.6 ms against the
# 30-token cell's warm 16.8 (the draft 8.05 against 6.96 for six members): ~2 ms a step, 7%, the size of the gap
# between 1.42x and issue 12's 1.5x. The workers log every eager first run and capture at --log-level debug
# (CudaBackend::RunGraph / LogCapture: the shape and, for a capture, where it first differs from a captured graph
# of the same shape); graph_shapes counts them by shape and reason. Then a plain k = 4 run beside it for the cost.
#   run(command="bash docs/runs/round43/callT.sh", carry=[".devpackF43"])   (~2 min)
set -u
export DEVPACK=${DEVPACK:-.devpackF43/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
six_streams k4.dbg 4 "--log-level debug"
for w in target draft; do
  graph_shapes "$O/six/k4.dbg/on.$w.log"
  xz -9 "$O/six/k4.dbg/on.$w.log"
done
six_streams k4 4
stamp done
bundle_out
