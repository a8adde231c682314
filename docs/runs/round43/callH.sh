#!/usr/bin/env bash
# Round 43 call H (run inline on call G's warm machine; pack .devpackF43): six streams adaptive with the new kernel
# on 9-32, twice, then gpu_check's products for every type with that range (100 s).
#   run(command="bash docs/runs/round43/callH.sh", carry=[".devpackF43"])   (~2.5 min)
set -u
export DEVPACK=${DEVPACK:-.devpackF43/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M8" --residual-gain 0.05
for t in ad1 ad2; do
  stamp "six streams $t: adaptive, 9-32"
  SVC_TARGET_FLAGS="--cuda-wgmma-cols 9-32" SVC_DRAFT_FLAGS="--cuda-wgmma-cols 9-32" OUT=$O/six/$t RUNS=on \
    TARGET=$M8/target.gguf DRAFT=$M8/draft.gguf TOKENS=256 SPEC_FLAGS="" timeout 120 bash tests/gpu/batch_spec.sh \
    > "$O/six_$t.txt" 2>&1
  echo "rc=$?"
  grep -hE "^\| speculative|^verify-greedy:|^k histogram" "$O/six_$t.txt" "$O/six/$t/on.stats.txt" | cut -c1-300
done
stamp "gpu_check --wgmma-cols 9-32 --matmul-only (all types)"
timeout 100 "$C/bin/gpu_check" --wgmma-cols 9-32 --matmul-only > "$O/check_all.log" 2>&1
echo "rc=$? ($(grep -c '^PASS' "$O/check_all.log") passed, $(grep -c '^FAIL' "$O/check_all.log") failed)"
grep -E "^FAIL" "$O/check_all.log" | head
stamp done
bundle_out
