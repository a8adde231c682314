#!/usr/bin/env bash
# Prepared for the next device session (not run): next-mmv-bload.patch (specd.bl) and it with
# next-mmv5-72b.patch (specd.b72) against this tree (next-pack-v.sh).
#  1. gpu_check.b72 --matmul-only --quick (every type's kernels == the host emulation bit for bit under the
#     device's plan, n = 1 .. 64; ~200 s reach Q8_0 130x25600; b72 holds bl's change), then --attn-only and
#     --no-matmul of both (decode == verify == batch, the models against the CPU);
#  2. bench_against 2 and bench_multi 1: decode, the 7-token pass (the 5-8-column kernel), batch 8, the
#     six sequences' verify of 30 columns (the wide kernel), alternating.
#   run(command="bash docs/runs/round29/next-callV.sh", carry=[".devpackV"])
# Then on the warm machine within 30 s, if one wins: the side-by-side table with it,
#   run(command="bash docs/runs/round28/callP.sh specd.bl", carry=[".peer"])  (or specd.b72)
set -u
export DEVPACK=.devpackV/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
stamp "gpu_check.b72 --matmul-only --quick"
timeout 200 "$C/bin/gpu_check.b72" --matmul-only --quick > "$O/check_b72_matmul.log" 2>&1
echo "rc=$? ($(grep -c '^PASS' "$O/check_b72_matmul.log") passed)"
grep -E "^FAIL|SUMMARY" "$O/check_b72_matmul.log" | head -20
xz -9 "$O/check_b72_matmul.log"
GPU_CHECK=gpu_check.bl gpu_checks --attn-only --no-matmul
GPU_CHECK=gpu_check.b72 gpu_checks --attn-only --no-matmul
wait $mkpid
CTX64_VERIFY=1,7 bench_against 2 specd specd.bl specd.b72
before 480 multi && bench_multi 1 specd specd.bl specd.b72
stamp done
bundle_out
