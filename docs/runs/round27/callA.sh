#!/usr/bin/env bash
# Round 27, call A (pack: bash docs/runs/round27/pack-a.sh; run(command="bash docs/runs/round27/callA.sh",
# carry=[".devpackM"])), in order of what the round needs first:
#  1. round 25's prepared m-tiles (docs/runs/round25/next-callM.sh): gpu_check.m2 --attn-only --no-matmul
#     --spec, gpu_check.m4 --attn-only;
#  2. gpu_check.tr (exp-attn-trace.patch): each attention block's phases by globaltimer in one forward
#     (decode at 64 and 4200, the 7-token pass at 4200, KV f16): where the launch's time goes;
#  3. bench_against 2 (verify 1 / 7 at 64, 1 / 4 / 7 at 4200), this tree against specd.m2, specd.m4 and
#     specd.rt (exp-rope-trigger.patch: RoPE lets the attention launch before it waits);
#     bench_multi 1 (six sequences' verify 4 at 1024: 30 columns) also with specd.wc2 / specd.wc4
#     (exp-wide-ct.patch: the wide matvec's column tiles 2 or 4 a GroupK call); prompts of 128 and 512
#     tokens with the dequantized-tile slab at 24 / 64 / 160 MiB (exp-slab.patch);
#  4. gpu_check --matmul-only of this tree: the landed wide matvec (17-32 columns a launch, more in passes
#     of 32) against mmv::Emulate bit for bit, first run as landed, in what is left of the call.
set -u
export DEVPACK=.devpackM/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
GPU_CHECK=gpu_check.m2 gpu_checks --attn-only --no-matmul --spec
GPU_CHECK=gpu_check.m4 gpu_checks --attn-only
for st in "1 1 64" "1 1 4200" "1 7 4200"; do
  stamp "gpu_check.tr --profile-step $st f16"
  # shellcheck disable=SC2086
  timeout 60 "$C/bin/gpu_check.tr" --profile-step $st f16 2>&1 | grep ATTN_TRACE
done
wait $mkpid
tail -1 "$O"/mk.*.txt
CTX64_VERIFY=1,7 bench_against 2 specd specd.m2 specd.m4 specd.rt
bench_multi 1 specd specd.m2 specd.m4 specd.wc2 specd.wc4
for b in specd specd.s24 specd.s160; do
  stamp "$b: prefill 128 and 512 tokens"
  for pf in "600 128" "1100 512"; do
    set -- $pf
    timeout 40 "$C/bin/$b" bench --backend cuda --model "$M6/target.gguf" --ctx $1 --prefill $2 --batches 1 \
      --verify-k 1 --reps 2 2>&1 | grep -E "^prefill" | tr '\n' '|'
  done
  echo
done
left=$(( 330 - ($(date +%s) - t0) ))
[ "$left" -gt 60 ] && CHECK_TIMEOUT=$(( left < 240 ? left : 240 )) gpu_checks --matmul-only
stamp done
bundle_out
