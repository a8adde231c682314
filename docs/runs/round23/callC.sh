#!/usr/bin/env bash
# Round 23 call C, issue 12 through the three services on the ~80% pair (make-model --residual-gain 0.05),
# this tree (services' KV Q8_0 now with K/V kept as quants): six streams, target-only against k = 4 and
# adaptive (docs/runs/round17/callCohort.sh, set "new"); then one stream (STREAMS=1 REQUESTS=4), adaptive.
# Pack: bash docs/runs/round23/pack.sh, then
#   run(command="bash docs/runs/round23/callC.sh", carry=[".devpackX"], kind="nvidia-h200")
set -u
export DEVPACK=.devpackX/devcarry.tar.xz
T00=$(date +%s)
rm -rf .devcarry  # a warm machine keeps the previous call's unpacked binaries
SETS=new MODES="k4 adaptive" bash docs/runs/round17/callCohort.sh
. tests/gpu/device_lib.sh
device_setup
t0=$T00  # the call's age for `before`
if before 470 one-stream; then
  stamp "one stream through the services, adaptive, ~80% pair"
  OUT=$O/s1 CARRY=$C STREAMS=1 REQUESTS=4 TARGET=$M8/target.gguf DRAFT=$M8/draft.gguf TOKENS=256 \
    timeout 110 bash tests/gpu/batch_spec.sh > "$O/s1.txt" 2>&1
  echo "rc=$?"
  tail -n 8 "$O/s1.txt"
  grep -hE "^(target|draft):.*forwards|^(k histogram|step costs)" "$O"/s1/on.stats.txt 2> /dev/null
fi
stamp done
bundle_out
