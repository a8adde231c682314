#!/usr/bin/env bash
# Round 23 call S: the 5-8-column matvec's register cap (b722fd7) on the H200 if lent, against the tree
# before it (580f321's kernels, specd.base), alternating, twice: batch 1 and 8 at context 64 with verify 4,
# verify 7 at 4200 (KV f16). Issue 11's "batch 8 >= 6x batch 1" is the ratio of the first line's two rows.
# Pack: bash docs/runs/round23/pack-s.sh, then
#   run(command="bash docs/runs/round23/callS.sh", carry=[".devpackS"], kind="nvidia-h200")
set -u
export DEVPACK=.devpackS/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6"
for rep in 1 2; do
  for b in specd.base specd; do
    stamp "$b (rep $rep): ctx 64 batch 1, 8, verify 4 | ctx 4200 verify 7"
    bench_row "$b" --ctx 64 --prefill 16 --batches 1,8 --verify-k 4
    bench_row "$b" --ctx 4200 --prefill 4096 --batches 1 --verify-k 7
  done
done
stamp done
