#!/usr/bin/env bash
# Round 43 call G: call F's six-stream target-only run (535.3 tok/s) fell 8% below call D's (584.8) and round 40's
# (566-579) on the same binaries' path (5-6 columns: the new kernel does not run), so its ratios are checked here:
# target-only and k = 4 with the new kernel's 9-32 alternating, twice, fresh services each (pack .devpackF43).
#   run(command="bash docs/runs/round43/callG.sh", carry=[".devpackF43"])   (~3 min)
set -u
export DEVPACK=${DEVPACK:-.devpackF43/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M8" --residual-gain 0.05
for v in "off1 off 0" "k4.new1 on 4" "off2 off 0" "k4.new2 on 4"; do
  set -- $v
  before 500 "six streams $1" || break
  stamp "six streams $1: k = $3, target and draft --cuda-wgmma-cols 9-32"
  SVC_TARGET_FLAGS="--cuda-wgmma-cols 9-32" SVC_DRAFT_FLAGS="--cuda-wgmma-cols 9-32" OUT=$O/six/$1 RUNS=$2 \
    TARGET=$M8/target.gguf DRAFT=$M8/draft.gguf TOKENS=256 SPEC_FLAGS="--k $3 --no-adaptive" \
    timeout 120 bash tests/gpu/batch_spec.sh > "$O/six_$1.txt" 2>&1
  echo "rc=$?"
  grep -hE "^\| (target-only|speculative)|^verify-greedy:|^  (speculative|target-only) steps" "$O/six_$1.txt" \
    "$O/six/$1/$2.stats.txt" 2> /dev/null | cut -c1-300
done
stamp done
bundle_out
