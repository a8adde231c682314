#!/usr/bin/env bash
# round 12 call A (one-off): the matvec in quads of paired columns, one after another from the ring
# (docs/runs/round11/next-matvec-quads.patch) against main's kernels (specd.base) on the same files:
# gpu_check --quick, decode at ctx 64 / 4200, verify k = 1..8, six sequences; then fresh generates on
# the ~80% pair with the verify warm-up re-applied (k = 4, 7, adaptive)
set -u
O=/tmp/r12a; mkdir -p $O; R=${OUT:-/tmp/r12a_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
[ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
M6=/tmp/peer_models/qwen3-27b-Q4_K_S-d6-Q4_K_M; M8=/tmp/peer_models/qwen3-27b-g0.05-Q4_K_S-d6-Q4_K_M
mk() {  # mk DIR [--residual-gain G]
  local d=$1; shift
  [ -f $d/target.gguf ] && [ -f $d/draft.gguf ] ||
    timeout 120 $C/bin/specd make-model --preset qwen3-27b --type Q4_K_S --fill blocks --sync=false --pair \
      --draft-layers 6 --draft-type Q4_K_M "$@" --out $d > $O/mk.$(basename $d).txt 2>&1
}
stamp "models (background) + gpu_check --quick"
( mk $M6; mk $M8 --residual-gain 0.05 ) &
mkpid=$!
timeout 200 $C/bin/gpu_check --quick > $O/check.log 2>&1; echo "check rc=$?"
grep -E "^FAIL|SUMMARY|checks|bit for bit" $O/check.log | head -30
wait $mkpid; ls -la $M6 $M8
T=$M6/target.gguf
for b in specd.base specd; do
  stamp "$b: decode ctx 4200 (depth 4096) batches 1,6, verify k 1..8"
  timeout 80 $C/bin/$b bench --backend cuda --model $T --ctx 4200 --prefill 4096 --batches 1,6 --verify-k 1,2,3,4,5,6,7,8 --reps 5 > $O/$b.depth.txt 2>&1
  sed -n '/^decode/,$p' $O/$b.depth.txt
  timeout 40 $C/bin/$b bench --backend cuda --model $T --ctx 64 --prefill 16 --batches 1 --verify-k 1 --reps 5 > $O/$b.ctx64.txt 2>&1
  sed -n '/^decode/,/^$/p' $O/$b.ctx64.txt
  timeout 60 $C/bin/$b bench --backend cuda --model $T --ctx 1100 --prefill 128 --batches 1,6 --verify-k 1,4 --verify-seqs 6 --reps 5 > $O/$b.seqs6.txt 2>&1
  sed -n '/^verify/,$p' $O/$b.seqs6.txt
  timeout 30 $C/bin/$b bench --backend cuda --model $M6/draft.gguf --ctx 64 --prefill 64 --batches 1 --verify-k 1 --reps 5 > $O/$b.draft.txt 2>&1
  sed -n '/^decode/,/^$/p' $O/$b.draft.txt
done
P="The history of the city begins with a small harbour where fishermen"
for b in specd.base specd; do
  for k in 4 7 adaptive; do
    stamp "$b: fresh generate ~80% pair, $k"
    KF=(--k $k); [ $k = adaptive ] && KF=()
    timeout 60 $C/bin/$b generate --backend cuda --max-seqs 1 --max-seq-len 2048 --max-tokens 256 --ignore-eos --prompt "$P" \
      --model $M8/target.gguf --draft $M8/draft.gguf "${KF[@]}" > $O/$b.gen.$k.txt 2>&1
    grep -h "tok/s\|steps by\|graph\|warm" $O/$b.gen.$k.txt | tail -n 6
  done
done
stamp done
tar -czf $R/r12a.tgz -C $O .
