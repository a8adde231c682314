#!/usr/bin/env bash
# Round 30 call L: the wide matvec's k-quant groups in one pass over the units for every column tile
# (GroupKWide; specd.lw / gpu_check.lw) against the tree (specd), and with the wide kernel from 9 columns
# (specd.lw9: MmvWide(n) = n > 8). Carry [".devpackL"] (pack-l.sh).
#   run(command="bash docs/runs/round30/callL.sh", carry=[".devpackL"], timeout_s=260)
set -u
export DEVPACK=.devpackL/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" > /dev/null 2>&1 & mk=$!
for b in gpu_check gpu_check.lw; do
  stamp "$b --bench-matvec (Q4_K)"
  timeout 30 "$C/bin/$b" --bench-matvec 2>&1 | grep -E "Q4_K"
done
wait $mk
for rep in 1 2; do
  for b in specd specd.lw specd.lw9; do
    stamp "$b (rep $rep): batch 6, 8 decode and six sequences' verify 2 / 4 (18 / 30 columns) at 1024; batch 12, 16"
    BENCH_TIMEOUT=40 bench_row "$b" --ctx 1024 --prefill 64 --batches 6,8,12,16 --verify-k 2,4 --verify-seqs 6
  done
done
stamp "gpu_check.lw --matmul-only --types Q4_K,Q5_K,Q6_K,Q2_K,Q3_K (to the call's 200th s)"
timeout $(( 200 - ($(date +%s) - t0) )) "$C/bin/gpu_check.lw" --matmul-only --types Q4_K,Q5_K,Q6_K,Q2_K,Q3_K > "$O/check_lw_matmul.log" 2>&1
echo "rc=$? ($(grep -c '^PASS' "$O/check_lw_matmul.log") passed)"
grep -E "^FAIL|SUMMARY" "$O/check_lw_matmul.log" | head -20
grep -E "bit for bit|bit-identical" "$O/check_lw_matmul.log" | cut -c1-150 | head -30
stamp "gpu_check.lw --no-matmul"
timeout 40 "$C/bin/gpu_check.lw" --no-matmul > "$O/check_lw_nomatmul.log" 2>&1
echo "rc=$?"; grep -E "^FAIL|SUMMARY" "$O/check_lw_nomatmul.log" | head
stamp done
