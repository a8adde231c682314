#!/usr/bin/env bash
# Prepared for the next session (not run in round 12): after `git apply
# docs/runs/round12/next-swiglu-in-matvec.patch` (and/or next-merge-rp4.patch), build specd + gpu_check
# into .devcarry (specd.base = main's specd for the comparison), then:
#   run(command="bash docs/runs/round12/callH.sh", carry=[".devpack"])
# gpu_check --quick (the matvec's emulation checks: its epilogue changed) and --no-matmul's model checks,
# then decode / verify / six sequences / draft against main's build on the same files.
set -u
O=/tmp/r12h; mkdir -p $O; R=${OUT:-/tmp/r12h_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
[ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
M6=/tmp/peer_models/qwen3-27b-Q4_K_S-d6-Q4_K_M
( [ -f $M6/target.gguf ] || timeout 120 $C/bin/specd make-model --preset qwen3-27b --type Q4_K_S --fill blocks --sync=false \
  --pair --draft-layers 6 --draft-type Q4_K_M --out $M6 > $O/mk.txt 2>&1 ) & mkpid=$!
stamp "gpu_check --quick"
timeout 220 $C/bin/gpu_check --quick > $O/check.log 2>&1; echo "check rc=$?"
grep -E "^FAIL|SUMMARY" $O/check.log | head -20
stamp "gpu_check --no-matmul"
timeout 100 $C/bin/gpu_check --no-matmul > $O/check2.log 2>&1; echo "check rc=$?"
grep -E "^FAIL|SUMMARY" $O/check2.log | head -20
wait $mkpid
T=$M6/target.gguf
for b in specd.base specd; do
  stamp "$b: decode ctx 4200 batches 1,6, verify k 1..8; ctx 64; six sequences; draft"
  timeout 80 $C/bin/$b bench --backend cuda --model $T --ctx 4200 --prefill 4096 --batches 1,6 --verify-k 1,2,3,4,5,6,7,8 --reps 5 > $O/$b.depth.txt 2>&1
  sed -n '/^decode/,$p' $O/$b.depth.txt
  timeout 40 $C/bin/$b bench --backend cuda --model $T --ctx 64 --prefill 16 --batches 1 --verify-k 1 --reps 5 > $O/$b.ctx64.txt 2>&1
  sed -n '/^decode/,/^$/p' $O/$b.ctx64.txt
  timeout 60 $C/bin/$b bench --backend cuda --model $T --ctx 1100 --prefill 128 --batches 1,6 --verify-k 1,4 --verify-seqs 6 --reps 5 > $O/$b.seqs6.txt 2>&1
  sed -n '/^verify/,$p' $O/$b.seqs6.txt
  timeout 30 $C/bin/$b bench --backend cuda --model $M6/draft.gguf --ctx 64 --prefill 64 --batches 1 --verify-k 1 --reps 5 > $O/$b.draft.txt 2>&1
  sed -n '/^decode/,/^$/p' $O/$b.draft.txt
done
stamp done
tar -czf $R/r12h.tgz -C $O .
