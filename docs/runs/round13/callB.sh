#!/usr/bin/env bash
# round 13 call B: the tensor-core attention reads a Q8_0 K/V row per lane as whole words (one memory
# round trip instead of a chain of 2-byte loads) and --cuda-attn-split: gpu_check --no-matmul, then decode
# / verify at depth 4096 and context 64 for main (specd.base) and the new build at splits 64, 128, 256
set -u
O=/tmp/r13b; mkdir -p $O; R=${OUT:-/tmp/r13b_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
[ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
M6=/tmp/peer_models/qwen3-27b-Q4_K_S-d6-Q4_K_M
( [ -f $M6/target.gguf ] || timeout 120 $C/bin/specd make-model --preset qwen3-27b --type Q4_K_S --fill blocks --sync=false \
  --pair --draft-layers 6 --draft-type Q4_K_M --out $M6 > $O/mk.txt 2>&1 ) & mkpid=$!
stamp "gpu_check --no-matmul"
timeout 150 $C/bin/gpu_check --no-matmul > $O/check.log 2>&1; echo "check rc=$?"
grep -E "^FAIL|SUMMARY|^BENCH attention" $O/check.log | head -20
wait $mkpid
T=$M6/target.gguf
run() {
  local tag=$1 b=$2; shift 2
  stamp "$tag: decode ctx 4200 batch 1, verify k 1,4,7,8; ctx 64"
  timeout 60 $C/bin/$b bench --backend cuda --model $T --ctx 4200 --prefill 4096 --batches 1 --verify-k 1,4,7,8 --reps 5 "$@" > $O/$tag.depth.txt 2>&1
  sed -n '/^decode/,$p' $O/$tag.depth.txt | grep -v "^$\|roofline [0-9]"
  timeout 40 $C/bin/$b bench --backend cuda --model $T --ctx 64 --prefill 16 --batches 1 --verify-k 1 --reps 5 "$@" > $O/$tag.ctx64.txt 2>&1
  sed -n '/^decode/,/^$/p' $O/$tag.ctx64.txt | grep "^ "
}
run base specd.base
run s128 specd
run s256 specd --cuda-attn-split 256
run s64 specd --cuda-attn-split 64
stamp "six sequences, context 1100: base, s128, s256"
for t in base s128 s256; do
  b=specd; F=(); [ $t = base ] && b=specd.base; [ $t = s256 ] && F=(--cuda-attn-split 256)
  timeout 60 $C/bin/$b bench --backend cuda --model $T --ctx 1100 --prefill 128 --batches 6 --verify-k 1,4 --verify-seqs 6 --reps 5 "${F[@]}" > $O/$t.seqs6.txt 2>&1
  sed -n '/^decode/,$p' $O/$t.seqs6.txt | grep -v "^$\|roofline [0-9]"
done
stamp done
tar -czf $R/r13b.tgz -C $O .
