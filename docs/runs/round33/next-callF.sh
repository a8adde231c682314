#!/usr/bin/env bash
# Prepared (not run): the wide matvec's fold part by part (fo1) and four parts at a time (fo4;
# next-wide-fold.patch) against the tree.
# Round 31 call A's ncu of the wide kernel (Q4_K 25600 x 5120, 30 columns; docs/runs/round31/callA/lwc30_sass.csv.xz)
# has ~29% of its warp stall samples after the main loop: the barrier around LastBlockArrives (~7%) and the
# last block's fold of the parts (~21%), which loaded output by output, one L2 round trip a part and output
# (16 outputs a thread). fo1 loads a part's 16 outputs together (one round trip a part), fo4 four parts' (one
# round trip for up to 4 parts; 128 registers, no spills for the k-quants); the same additions in the same
# order (the same bits).
#   run(command="bash docs/runs/round33/next-callF.sh", carry=[".devpackF33"])   (next-pack-f.sh builds it)
#  1. gpu_check --bench-matvec (Q4_K lines) of the three builds, alternating, twice;
#  2. six sequences' verify of 18 / 30 columns and batches 6 / 8, alternating, two runs;
#  3. gpu_check.fo4 --matmul-only over every packed type (bit for bit against the emulation at n = 1..64),
#     --no-matmul; fo1's --matmul-only of the k-quants;
#  4. ncu --set full of fo4's 30-column launch on Q4_K 25600 x 5120 (the fold's share of the stall samples).
set -u
export DEVPACK=.devpackF33/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M6" > /dev/null 2>&1 & mk=$!
for rep in 1 2; do
  for b in gpu_check gpu_check.fo1 gpu_check.fo4; do
    stamp "$b --bench-matvec (Q4_K, rep $rep)"
    timeout 30 "$C/bin/$b" --bench-matvec 2>&1 | grep -E "Q4_K"
  done
done
wait $mk
bench_verify6 2 specd specd.fo1 specd.fo4
GPU_CHECK=gpu_check.fo4 CHECK_TIMEOUT=120 CHECK_TYPES=Q4_K,Q5_K,Q6_K,Q2_K,Q3_K,Q8_0,Q4_0,Q4_1,Q5_0,Q5_1 gpu_checks --matmul-only
GPU_CHECK=gpu_check.fo4 CHECK_TIMEOUT=40 gpu_checks --no-matmul
GPU_CHECK=gpu_check.fo1 CHECK_TIMEOUT=40 CHECK_TYPES=Q4_K,Q5_K,Q6_K gpu_checks --matmul-only
before 500 "ncu" && ncu_full_of fo30 MmvKernelWide 216 1 "$C/bin/gpu_check.fo4" --bench-matvec
stamp done
bundle_out
