#!/usr/bin/env bash
# Round 31 call D: wide blocks of up to 16 warps (w16) against the tree.
#   run(command="bash docs/runs/round31/callD.sh", carry=[".devpackD31"])   (pack-d.sh builds it)
set -u
export DEVPACK=.devpackD31/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M6" > /dev/null 2>&1 & mk=$!
for b in gpu_check gpu_check.w16 gpu_check gpu_check.w16; do
  stamp "$b --bench-matvec (Q4_K)"
  timeout 30 "$C/bin/$b" --bench-matvec 2>&1 | grep -E "Q4_K"
done
wait $mk
for rep in 1 2; do
  for b in specd specd.w16; do
    stamp "$b (rep $rep): batch 6, 8 decode and six sequences' verify 2 / 4 (18 / 30 columns) at 1024"
    BENCH_TIMEOUT=40 bench_row "$b" --ctx 1024 --prefill 64 --batches 6,8 --verify-k 2,4 --verify-seqs 6
  done
done
stamp "gpu_check.w16 --matmul-only Q4_K,Q6_K (40 s)"
timeout 40 "$C/bin/gpu_check.w16" --matmul-only --types Q4_K,Q6_K > "$O/check_w16_matmul.log" 2>&1
echo "rc=$? ($(grep -c '^PASS' "$O/check_w16_matmul.log") passed)"; grep -E "^FAIL|SUMMARY" "$O/check_w16_matmul.log" | head
stamp done
bundle_out
