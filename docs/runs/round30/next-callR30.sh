#!/usr/bin/env bash
# Prepared for the next device session (not run): the wide matvec templated on its column tiles (tn), the same
# on the one-pass structure (lwn) and that in 4-warp blocks (lwn4) against the tree, then ncu of the product's wide kernel beside the lean
# prototype (round 30: the prototype with the same integers ~1.5x faster at 30 columns; find where).
#   run(command="bash docs/runs/round30/next-callR30.sh", carry=[".devpackR30"])   (next-pack-r30.sh builds it)
#  1. gpu_check --bench-matvec (Q4_K lines) of the three builds;
#  2. the six sequences' verify of 18 / 30 columns and batches 6 / 8, alternating, two runs;
#  3. gpu_check.tn / .lwn / .lwn4 --matmul-only --types Q4_K,Q5_K,Q6_K (bit for bit against the emulation) and --no-matmul;
#  4. the prototype's timings (its kI8Limb: the lean loop with the product's exact mins);
#  5. ncu --set full of one 30-column launch on Q4_K 25600 x 5120: the product's wide kernel (--bench-matvec, 216
#     launches of n = 24 before it) and the prototype's kI8Imad kernel (449 ProtoKernel launches before it):
#     headline metrics and the warp stall samples by SASS region.
set -u
export DEVPACK=.devpackR30/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" > /dev/null 2>&1 & mk=$!
for b in gpu_check gpu_check.tn gpu_check.lwn gpu_check.lwn4; do
  stamp "$b --bench-matvec (Q4_K)"
  timeout 30 "$C/bin/$b" --bench-matvec 2>&1 | grep -E "Q4_K"
done
wait $mk
for rep in 1 2; do
  for b in specd specd.tn specd.lwn specd.lwn4; do
    stamp "$b (rep $rep): batch 6, 8 decode and six sequences' verify 2 / 4 (18 / 30 columns) at 1024"
    BENCH_TIMEOUT=40 bench_row "$b" --ctx 1024 --prefill 64 --batches 6,8 --verify-k 2,4 --verify-seqs 6
  done
done
for v in tn lwn lwn4; do
  stamp "gpu_check.$v --matmul-only --types Q4_K,Q5_K,Q6_K (45 s)"
  timeout 45 "$C/bin/gpu_check.$v" --matmul-only --types Q4_K,Q5_K,Q6_K > "$O/check_${v}_matmul.log" 2>&1
  echo "rc=$? ($(grep -c '^PASS' "$O/check_${v}_matmul.log") passed)"; grep -E "^FAIL" "$O/check_${v}_matmul.log" | head
  GPU_CHECK=gpu_check.$v CHECK_TIMEOUT=40 gpu_checks --no-matmul
done
stamp "the prototype (every mode; kI8Limb: the exact mins' cost)"
timeout 60 "$C/bin/proto_f16mma" 2>&1 | grep -E "i8imad|i8limb|prototype"
before 480 "ncu" && ncu_full_of wide30 MmvKernelWide 216 1 "$C/bin/gpu_check" --bench-matvec
before 540 "ncu" && ncu_full_of lean30 ProtoKernel 449 1 "$C/bin/proto_f16mma"
stamp done
bundle_out
