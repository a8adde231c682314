#!/usr/bin/env bash
# Round 15 call G: six streams through the three services on the ~80% pair with the final build (call F's
# binaries: SwiGLU with QuantizeGroupBlock): k = 4 fixed (as rounds 13-14) and the default adaptive policy.
set -u
. tests/gpu/device_lib.sh
device_setup
make_pair $M8 --residual-gain 0.05
for mode in k4 adaptive; do
  flags="--k 4 --no-adaptive"; [ $mode = adaptive ] && flags=""
  stamp "six streams through the services, $mode, ~80% pair"
  OUT=$O/s6$mode TARGET=$M8/target.gguf DRAFT=$M8/draft.gguf TOKENS=256 SPEC_FLAGS="$flags" timeout 200 bash tests/gpu/batch_spec.sh 2>&1 | tail -n 14
done
tar -czf $O/r15g.tgz -C $O s6k4 s6adaptive 2>/dev/null; rm -rf $O/s6k4 $O/s6adaptive
stamp done
