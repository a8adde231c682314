#!/usr/bin/env bash
# Round 14 call C: matvec plan / ring depth sweep. gpu_check --bench-matvec under each configuration
# (even plans where a warp gets >= N records, tile plans, 2-4 ring slots), then decode / verify / draft
# through specd bench for the promising ones (SPECD_X_* : experiment-only environment of this build),
# against main (specd.base); then the matmul part of gpu_check --quick (bit-exact vs mmv::Emulate).
set -u
# (The preamble moved to tests/gpu/device_lib.sh after the run: the same commands.)
. tests/gpu/device_lib.sh
device_setup
make_pair $M6 & mkpid=$!
i=0
for cfg in "" "--mmv-tile" "--mmv-tile --mmv-stages=3" "--mmv-tile --mmv-stages=2" "--mmv-stages=3" "--mmv-even-min-run=1 --mmv-stages=3" "--mmv-even-min-run=1"; do
  i=$((i+1)); stamp "bench-matvec [$cfg]"
  timeout 60 $C/bin/gpu_check $cfg --bench-matvec > $O/mv$i.txt 2>&1
  grep "^  " $O/mv$i.txt | grep -E "Q4_K|Q6_K" | sed -E 's/  n=2 [^u]*us//; s/  n=(7|8|9) [^u]*us//g'
done
wait $mkpid
T=$M6/target.gguf
run() {  # name, binary, env...
  local name=$1 b=$2; shift 2
  stamp "$name"
  env "$@" timeout 40 $C/bin/$b bench --backend cuda --model $T --ctx 64 --prefill 16 --batches 1,8 --verify-k 1,4 --reps 5 > $O/$name.ctx64.txt 2>&1
  sed -n '/^decode/,$p' $O/$name.ctx64.txt | grep "^ " | tr -s ' ' | tr '\n' '|'; echo
  env "$@" timeout 60 $C/bin/$b bench --backend cuda --model $T --ctx 4200 --prefill 4096 --batches 1 --verify-k 1,4,7 --reps 5 > $O/$name.depth.txt 2>&1
  sed -n '/^decode/,$p' $O/$name.depth.txt | grep "^ " | tr -s ' ' | tr '\n' '|'; echo
  env "$@" timeout 30 $C/bin/$b bench --backend cuda --model $M6/draft.gguf --ctx 64 --prefill 64 --batches 1 --verify-k 1 --reps 5 > $O/$name.draft.txt 2>&1
  sed -n '/^decode/,/^$/p' $O/$name.draft.txt | grep "^ " | tr -s ' ' | tr '\n' '|'; echo
}
run base specd.base X=1
run even8 specd X=1
run tile specd SPECD_X_MMV_TILE=1
run tile_s3 specd SPECD_X_MMV_TILE=1 SPECD_X_MMV_STAGES=3
run even8_s3 specd SPECD_X_MMV_STAGES=3
run even1 specd SPECD_X_MMV_MINRUN=1
stamp "gpu_check --quick (matmul part)"
timeout 100 $C/bin/gpu_check --quick > $O/check_quick.log 2>&1
grep -c "^PASS" $O/check_quick.log; grep -E "^FAIL" $O/check_quick.log | head -10
cat $O/*.txt $O/*.log > $O/all.log 2>/dev/null; xz -9 $O/all.log; rm -f $O/*.txt
stamp done
