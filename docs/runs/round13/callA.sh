#!/usr/bin/env bash
# round 13 call A: round 12's prepared patches applied (SwiGLU in the gate/up matvec launch, the
# attention merge with four rows per warp, the verify warm-up that grows the buffers first):
# gpu_check --quick and --no-matmul on the new build, then decode / verify / six sequences / draft for
# main (specd.base), SwiGLU only (specd.glu) and all three (specd) on the same files, then fresh
# generates on the ~80% pair (k = 7, adaptive, warm-up off, debug log of graph drops) and the lossless check
set -u
O=/tmp/r13a; mkdir -p $O; R=${OUT:-/tmp/r13a_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
[ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
M6=/tmp/peer_models/qwen3-27b-Q4_K_S-d6-Q4_K_M; M8=/tmp/peer_models/qwen3-27b-g0.05-Q4_K_S-d6-Q4_K_M
mk() {
  local d=$1; shift
  [ -f $d/target.gguf ] && [ -f $d/draft.gguf ] ||
    timeout 120 $C/bin/specd make-model --preset qwen3-27b --type Q4_K_S --fill blocks --sync=false --pair \
      --draft-layers 6 --draft-type Q4_K_M "$@" --out $d > $O/mk.$(basename $d).txt 2>&1
}
stamp "models (background) + gpu_check --quick, --no-matmul"
( mk $M6; mk $M8 --residual-gain 0.05 ) & mkpid=$!
timeout 200 $C/bin/gpu_check --quick > $O/check.log 2>&1; echo "check --quick rc=$?"
grep -E "^FAIL|SUMMARY" $O/check.log | head -20
timeout 150 $C/bin/gpu_check --no-matmul > $O/check2.log 2>&1; echo "check --no-matmul rc=$?"
grep -E "^FAIL|SUMMARY" $O/check2.log | head -20
wait $mkpid
T=$M6/target.gguf
for b in specd.base specd.glu specd; do
  stamp "$b: decode ctx 4200 batches 1,6, verify k 1..8; ctx 64; draft"
  timeout 80 $C/bin/$b bench --backend cuda --model $T --ctx 4200 --prefill 4096 --batches 1,6 --verify-k 1,2,3,4,5,6,7,8 --reps 5 > $O/$b.depth.txt 2>&1
  sed -n '/^decode/,$p' $O/$b.depth.txt | grep -v "^$"
  timeout 40 $C/bin/$b bench --backend cuda --model $T --ctx 64 --prefill 16 --batches 1 --verify-k 1 --reps 5 > $O/$b.ctx64.txt 2>&1
  sed -n '/^decode/,/^$/p' $O/$b.ctx64.txt
  timeout 30 $C/bin/$b bench --backend cuda --model $M6/draft.gguf --ctx 64 --prefill 64 --batches 1 --verify-k 1 --reps 5 > $O/$b.draft.txt 2>&1
  sed -n '/^decode/,/^$/p' $O/$b.draft.txt
done
for b in specd.base specd; do
  stamp "$b: six sequences"
  timeout 60 $C/bin/$b bench --backend cuda --model $T --ctx 1100 --prefill 128 --batches 1,6 --verify-k 1,4 --verify-seqs 6 --reps 5 > $O/$b.seqs6.txt 2>&1
  sed -n '/^verify/,$p' $O/$b.seqs6.txt
done
P="The history of the city begins with a small harbour where fishermen"
G=(generate --backend cuda --max-seqs 1 --max-seq-len 2048 --max-tokens 256 --ignore-eos --prompt "$P" --model $M8/target.gguf --draft $M8/draft.gguf)
for k in 7 adaptive adaptive-nowarm 7-dbg; do
  stamp "fresh generate ~80% pair, $k"
  KF=(--k $k); [ $k = adaptive ] && KF=(); [ $k = adaptive-nowarm ] && KF=(--warmup=false); [ $k = 7-dbg ] && KF=(--k 7 --log-level debug)
  timeout 60 $C/bin/specd "${G[@]}" "${KF[@]}" > $O/gen.$k.txt 2>&1
  grep -h "tok/s\|target graphs" $O/gen.$k.txt
done
grep -h "graphs dropped" $O/gen.7-dbg.txt | cut -c1-200 | head -n 10
stamp "target only + greedy speculation print ids (lossless)"
timeout 60 $C/bin/specd "${G[@]}" --no-speculation --print-ids > $O/ids.target.txt 2>&1
timeout 60 $C/bin/specd "${G[@]}" --k 4 --print-ids > $O/ids.k4.txt 2>&1
for f in target k4; do tail -n 1 $O/ids.$f.txt | md5sum; done
stamp done
tar -czf $R/r13a.tgz -C $O .
