#!/usr/bin/env bash
# Round 27, call A (pack: bash docs/runs/round27/pack-a.sh; run(command="bash docs/runs/round27/callA.sh",
# carry=[".devpackM"])):
#  1. gpu_check --matmul-only of this tree: the landed wide matvec (17-32 columns a launch, more in passes
#     of 32) against mmv::Emulate bit for bit, first run as landed;
#  2. round 25's prepared m-tiles call (docs/runs/round25/next-callM.sh): gpu_check.m2 / .m4 --attn-only
#     --no-matmul --spec, ncu of the 7-token pass at 4200 with each build, then bench_against 2 (verify 1 / 7
#     at 64, 1 / 4 / 7 at 4200) and bench_multi 1 (six sequences' verify 4 at 1024), this tree against
#     specd.m2 and specd.m4;
#  3. gpu_check.tr (this tree with exp-attn-trace.patch): each attention block's phases by globaltimer in
#     one forward (decode at 64 and 4200, the 7-token pass at 4200, KV f16): where the launch's time goes.
set -u
export DEVPACK=.devpackM/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
CHECK_TIMEOUT=240 gpu_checks --matmul-only
GPU_CHECK=gpu_check.m2 gpu_checks --attn-only --no-matmul --spec
GPU_CHECK=gpu_check.m4 gpu_checks --attn-only --no-matmul --spec
for st in "1 1 64" "1 1 4200" "1 7 4200"; do
  stamp "gpu_check.tr --profile-step $st f16"
  # shellcheck disable=SC2086
  timeout 60 "$C/bin/gpu_check.tr" --profile-step $st f16 2>&1 | grep ATTN_TRACE
done
ncu_step 1 7 4200 f16
GPU_CHECK=gpu_check.m2 ncu_step 1 7 4200 f16
GPU_CHECK=gpu_check.m4 ncu_step 1 7 4200 f16
wait $mkpid
cat "$O"/mk.*.txt | tail -1
CTX64_VERIFY=1,7 bench_against 2 specd specd.m2 specd.m4
before 520 multi && bench_multi 1 specd specd.m2 specd.m4
stamp done
bundle_out
