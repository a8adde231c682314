#!/usr/bin/env bash
# One device-tool call for the end-to-end GPU figures of docs/PERFORMANCE.md:
# the 24 GiB plan (computed and allocated), `specd bench` on the 27B/32B-class
# targets and their drafts (synthetic weights, no files), and speculative
# decoding on a derived pair, in-process and through the three gRPC services.
#
# Binaries and their shared libraries are built here and carried in
# .devcarry/ (tests/gpu/make_carry.sh); the device supplies the CUDA runtime.
#   tests/gpu/e2e_device.sh [all|plan|bench|pair]      logs under $OUT
set -u
mode=${1:-all}
OUT=${OUT:-/tmp/e2e_out}
mkdir -p "$OUT"
root=$(pwd)
C=$root/.devcarry
export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
S=$C/bin/specd
LOG=$OUT/e2e.log
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$LOG"
if ! "$S" --help > /dev/null 2>&1; then
  echo "carried specd does not start:"; ldd "$S" | grep -i "not found"; "$S" --help 2>&1 | head -5; exit 1
fi
run() {  # run TIMEOUT cmd...: prints and logs the command and the tail of its output
  local t=$1; shift
  echo "== $*" | tee -a "$LOG"
  timeout "$t" "$@" > "$OUT/last.txt" 2>&1
  local rc=$?
  cat "$OUT/last.txt" >> "$LOG"
  grep -vE "^(ts=|  (weights|kv pool|activations|exchange|runtime|total|budget) )" "$OUT/last.txt" | tail -n "${N:-30}"
  echo "   (rc=$rc)" | tee -a "$LOG"
}

if [ "$mode" = all ] || [ "$mode" = plan ]; then
  N=30 run 120 "$S" plan --target-preset qwen3-27b --target-type Q4_K_S --draft-preset qwen2.5-3b \
    --draft-type Q4_K_M --kv-type q8_0 --max-seqs 6 --max-seq-len 4096 --vram-budget 24GiB --allocate
fi

if [ "$mode" = all ] || [ "$mode" = bench ]; then
  B="$S bench --backend cuda --reps 10 --bandwidth-bytes 4GiB"
  N=24 run 200 $B --preset qwen3-32b --type Q4_K_M --ctx 4096 --prefill 512 --batches 1 --verify-k 1,2,3,4,5,6,7,8 --json "$OUT/b32m.json"
  N=12 run 150 $B --preset qwen3-32b --type Q4_K_S --ctx 4096 --prefill 256 --batches 1 --verify-k 6 --json "$OUT/b32s.json"
  N=20 run 200 $B --preset qwen3-27b --type Q4_K_S --ctx 512 --prefill 512 --batches 1,2,4,8,16 --verify-k 6 --json "$OUT/b27s.json"
  for d in qwen2.5-3b qwen3-0.6b qwen3-1.7b qwen3-4b; do
    N=10 run 90 $B --preset $d --type Q4_K_M --ctx 4096 --prefill 256 --batches 1 --verify-k 1 --json "$OUT/b_$d.json"
  done
fi

if [ "$mode" = all ] || [ "$mode" = pair ]; then
  P=/tmp/pair
  N=4 run 240 "$S" make-model --preset 1b --type Q4_K_M --pair --draft-layers 2 --out $P
  G="--backend cuda --max-seqs 2 --max-seq-len 2048"
  N=16 run 120 "$S" bench $G --model $P/target.gguf --ctx 512 --prefill 256 --batches 1 --verify-k 1,2,4,6 --reps 20
  N=12 run 120 "$S" bench $G --model $P/draft.gguf --ctx 512 --prefill 256 --batches 1 --verify-k 1 --reps 20
  PROMPT="The history of the city begins with a small harbour where fishermen"
  for k in 0 2 4 6 8; do
    if [ $k = 0 ]; then
      N=2 run 120 "$S" generate $G --model $P/target.gguf --prompt "$PROMPT" --max-tokens 256 --ignore-eos
    else
      N=2 run 120 "$S" generate $G --model $P/target.gguf --draft $P/draft.gguf --k $k --prompt "$PROMPT" --max-tokens 256 --ignore-eos
    fi
  done
  if [ -d "$root/.devcarry/models" ]; then  # the real trained pair, when carried
    M=$root/.devcarry/models
    CODE=$'import os\nimport sys\n\n\ndef main(argv):\n    """Parse the arguments and run."""\n'
    for k in 0 4 6; do
      if [ $k = 0 ]; then
        N=2 run 60 "$S" generate $G --model $M/pycode-target-10m-f16.gguf --prompt "$CODE" --max-tokens 256 --ignore-eos
      else
        N=2 run 60 "$S" generate $G --model $M/pycode-target-10m-f16.gguf --draft $M/pycode-draft-0.4m-f16.gguf --k $k --prompt "$CODE" --max-tokens 256 --ignore-eos
      fi
    done
  fi
  # The product path: three processes on one GPU, gRPC on loopback, CUDA IPC
  # where the workers use it.
  W="--backend cuda --max-seqs 4 --max-seq-len 2048 --vram-budget 20GiB"
  "$C/bin/specd-target-worker" --model $P/target.gguf --listen 127.0.0.1:7811 $W > "$OUT/target.log" 2>&1 &
  tp=$!
  "$C/bin/specd-draft-worker" --model $P/draft.gguf --listen 127.0.0.1:7812 $W > "$OUT/draft.log" 2>&1 &
  dp=$!
  "$C/bin/specd-coordinator" --target 127.0.0.1:7811 --draft 127.0.0.1:7812 --listen 127.0.0.1:7810 > "$OUT/coord.log" 2>&1 &
  cp=$!
  for i in $(seq 1 60); do
    "$S" stats --coordinator 127.0.0.1:7810 2>/dev/null | grep -q "draft ready" && break
    sleep 1
  done
  for opt in "--no-speculation" "--k 4" "--k 6" "--k 4"; do
    N=2 run 120 "$S" generate --coordinator 127.0.0.1:7810 $opt --prompt "$PROMPT" --max-tokens 256 --ignore-eos
  done
  N=12 run 30 "$S" stats --coordinator 127.0.0.1:7810
  kill $cp $dp $tp 2>/dev/null
  wait 2>/dev/null
  grep -E "memory|ledger|total|backend" "$OUT/target.log" | head -12
fi
echo "== done"
