#!/usr/bin/env bash
# Round 14 call B: even-split matvec (runs across tiles over every resident warp, shared tiles summed
# in part order by their last arrival) + round 13's attention patch (specd) against main (specd.base):
# gpu_check (matvec bit-exact vs mmv::Emulate on the even plans, models), the matvec microbenchmark
# even vs tile (--mmv-tile), decode / verify / draft.
set -u
# (The preamble moved to tests/gpu/device_lib.sh after the run: the same commands.)
. tests/gpu/device_lib.sh
device_setup
make_pair $M6 & mkpid=$!
stamp "matvec microbenchmark: even, then tile"
timeout 60 $C/bin/gpu_check --bench-matvec > $O/mv_even.txt 2>&1; grep "^  " $O/mv_even.txt
timeout 60 $C/bin/gpu_check --mmv-tile --bench-matvec > $O/mv_tile.txt 2>&1; grep "^  " $O/mv_tile.txt
stamp "gpu_check --quick"
timeout 200 $C/bin/gpu_check --quick > $O/check_quick.log 2>&1; echo "rc=$?"
grep -E "^FAIL|SUMMARY" $O/check_quick.log | head -20
wait $mkpid
T=$M6/target.gguf
for b in specd.base specd; do
  stamp "$b: target ctx 64 (batch 1, 8), ctx 4200 (verify 1,4,7); draft ctx 64"
  timeout 40 $C/bin/$b bench --backend cuda --model $T --ctx 64 --prefill 16 --batches 1,8 --verify-k 1,4 --reps 5 > $O/$b.ctx64.txt 2>&1
  sed -n '/^decode/,$p' $O/$b.ctx64.txt | grep "^ "
  timeout 60 $C/bin/$b bench --backend cuda --model $T --ctx 4200 --prefill 4096 --batches 1 --verify-k 1,4,7 --reps 5 > $O/$b.depth.txt 2>&1
  sed -n '/^decode/,$p' $O/$b.depth.txt | grep -v "^$\|roofline [0-9]"
  timeout 30 $C/bin/$b bench --backend cuda --model $M6/draft.gguf --ctx 64 --prefill 64 --batches 1 --verify-k 1 --reps 5 > $O/$b.draft.txt 2>&1
  sed -n '/^decode/,/^$/p' $O/$b.draft.txt | grep "^ "
done
stamp "gpu_check --no-matmul"
timeout 150 $C/bin/gpu_check --no-matmul > $O/check_nomm.log 2>&1; echo "rc=$?"
grep -E "^FAIL|SUMMARY" $O/check_nomm.log | head -20
cat $O/*.txt $O/*.log > $O/all.log 2>/dev/null; xz -9 $O/all.log
stamp done
