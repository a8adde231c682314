#!/usr/bin/env bash
# Prepared for the next device session (not run): next-mmv-bload.patch (next-pack-v.sh) against this tree.
#  1. gpu_check.bl --matmul-only --quick (every type's kernels == the host emulation bit for bit, n = 1 .. 64;
#     ~200 s reach Q8_0 130x25600), then --attn-only and --no-matmul (decode == verify == batch, the models
#     against the CPU);
#  2. bench_against 2 and bench_multi 2: decode, the 7-token pass (the 5-8-column kernel), batch 8, the
#     six sequences' verify of 30 columns (the wide kernel), alternating.
#   run(command="bash docs/runs/round29/next-callV.sh", carry=[".devpackV"])
# Then on the warm machine within 30 s, if it wins: the side-by-side table with specd.bl,
#   run(command="bash docs/runs/round28/callP.sh specd.bl", carry=[".peer"])
set -u
export DEVPACK=.devpackV/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
stamp "gpu_check.bl --matmul-only --quick"
timeout 200 "$C/bin/gpu_check.bl" --matmul-only --quick > "$O/check_bl_matmul.log" 2>&1
echo "rc=$? ($(grep -c '^PASS' "$O/check_bl_matmul.log") passed)"
grep -E "^FAIL|SUMMARY" "$O/check_bl_matmul.log" | head -20
xz -9 "$O/check_bl_matmul.log"
GPU_CHECK=gpu_check.bl gpu_checks --attn-only --no-matmul
wait $mkpid
CTX64_VERIFY=1,7 bench_against 2 specd specd.bl
before 470 multi && bench_multi 2 specd specd.bl
stamp done
bundle_out
