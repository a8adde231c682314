#!/usr/bin/env bash
# round 12 call B (one-off): (1) why fresh requests capture graphs after the verify warm-up (debug log of
# each capture: shape, first differing op); warm-up on/off; (2) what the small kernels cost on the decode
# step's critical path: an experimental build (specd.exp, not committed) skips op kinds given by the mask
# SPECD_EXP_SKIP (bit = op kind: 2 RMSNorm(+quant), 4 standalone quant, 5 RoPE, 6 attention, 7 SwiGLU)
set -u
O=/tmp/r12b; mkdir -p $O; R=${OUT:-/tmp/r12b_out}; mkdir -p $R
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
stamp models
mk $M8 --residual-gain 0.05
( mk $M6 ) & mkpid=$!
P="The history of the city begins with a small harbour where fishermen"
G=(generate --backend cuda --max-seqs 1 --max-seq-len 2048 --max-tokens 256 --ignore-eos --prompt "$P" --model $M8/target.gguf --draft $M8/draft.gguf)
for k in 4 adaptive; do
  stamp "captures, $k, debug log"
  KF=(--k $k); [ $k = adaptive ] && KF=()
  timeout 60 $C/bin/specd "${G[@]}" "${KF[@]}" --log-level debug > $O/dbg.$k.txt 2>&1
  grep -h "tok/s\|target graphs\|draft graphs" $O/dbg.$k.txt
  grep -h "cuda graph capture" $O/dbg.$k.txt | sed 's/.*cuda graph capture//' | head -n 40
done
for w in false true; do
  for k in 7 adaptive; do
    stamp "warmup=$w $k"
    KF=(--k $k); [ $k = adaptive ] && KF=()
    timeout 60 $C/bin/specd "${G[@]}" "${KF[@]}" --warmup=$w > $O/gen.w$w.$k.txt 2>&1
    grep -h "tok/s\|target graphs" $O/gen.w$w.$k.txt
  done
done
wait $mkpid
T=$M6/target.gguf
for m in 0 0x4 0x10 0x20 0x40 0x80 0xF4; do
  stamp "skip mask $m: decode at depth 4096, draft decode"
  SPECD_EXP_SKIP=$m timeout 50 $C/bin/specd.exp bench --backend cuda --model $T --ctx 4200 --prefill 4096 --batches 1 --verify-k 1 --reps 5 > $O/skip.$m.txt 2>&1
  sed -n '/^decode/,/^$/p' $O/skip.$m.txt | sed -n 3p
  SPECD_EXP_SKIP=$m timeout 30 $C/bin/specd.exp bench --backend cuda --model $M6/draft.gguf --ctx 64 --prefill 64 --batches 1 --verify-k 1 --reps 5 > $O/skipd.$m.txt 2>&1
  sed -n '/^decode/,/^$/p' $O/skipd.$m.txt | sed -n 3p
done
stamp done
tar -czf $R/r12b.tgz -C $O .
