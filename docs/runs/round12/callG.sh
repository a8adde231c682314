#!/usr/bin/env bash
# round 12 call G (one-off): the attention's in-block merge with up to four rows per warp at once (a
# 16-row verify tile in one pass) and deeper load pipelining: gpu_check --no-matmul, decode and verify at
# depth 4096 and decode at context 64 (compare with call D)
set -u
O=/tmp/r12g; mkdir -p $O; R=${OUT:-/tmp/r12g_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
[ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
M6=/tmp/peer_models/qwen3-27b-Q4_K_S-d6-Q4_K_M
( [ -f $M6/target.gguf ] || timeout 120 $C/bin/specd make-model --preset qwen3-27b --type Q4_K_S --fill blocks --sync=false \
  --pair --draft-layers 6 --draft-type Q4_K_M --out $M6 > $O/mk.txt 2>&1 ) & mkpid=$!
stamp "gpu_check --no-matmul"
timeout 100 $C/bin/gpu_check --no-matmul > $O/check.log 2>&1; echo "check rc=$?"
grep -E "^FAIL|SUMMARY" $O/check.log | head -20
wait $mkpid
stamp "decode ctx 4200, verify k 1..8; decode ctx 64"
timeout 70 $C/bin/specd bench --backend cuda --model $M6/target.gguf --ctx 4200 --prefill 4096 --batches 1 --verify-k 1,2,3,4,5,6,7,8 --reps 5 > $O/depth.txt 2>&1
sed -n '/^decode/,$p' $O/depth.txt
timeout 40 $C/bin/specd bench --backend cuda --model $M6/target.gguf --ctx 64 --prefill 16 --batches 1 --verify-k 1 --reps 5 > $O/ctx64.txt 2>&1
sed -n '/^decode/,/^$/p' $O/ctx64.txt
stamp done
tar -czf $R/r12g.tgz -C $O .
