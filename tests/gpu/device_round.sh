#!/usr/bin/env bash
# One device-tool call that runs several stages back to back (the machine's
# start dominates a call's cost, so a round does everything it can):
#   check   gpu_check against the CPU reference  (tests/gpu/run_device.sh check)
#   ipc     the CUDA IPC exchange through the three services (ipc_device_check.sh)
#   spec    specd bench-spec: target-only vs fixed k vs adaptive on the mixed
#           workload, CUDA backend, for the trained pair and a derived 1b pair
#           (with the step anatomy: draft forwards, verify, acceptance,
#           transport, host per step)
#   specs   the same, sampled (temperature 0.7, top-p 0.9)
#   cpuspec the same on the CPU backend (the lent machine's 16 idle cores): the
#           trained pair and a derived 100m Q8_0 pair
#   bench   gpu_check --bench (matvec/attention microbenchmarks, model decode/verify)
#   e2e     tests/gpu/e2e_device.sh bench (specd bench on the 27B/32B shapes)
#   bench27 specd bench on the 27B-class Q4_K_S shape (depth 0-ish and 4096,
#           verify k = 1..8) and the Qwen2.5-3B draft shape, synthetic weights
#   ncustep per-kernel GPU time of one 27B-class decode step (ncu, graphs off)
#   peerbuild  starts building llama.cpp (the peer, from .peer/) detached, so
#           that it finishes during this call's other stages; idempotent
#   speccheck  gpu_check --spec: CUDA Sample/Accept in device kernels (the
#           default), the proposal and lossless speculation on the GPU
#   spechost  the same on the host-sampling fallback (--spec-host)
#   pair27  the 27B-class pair tests/gpu/peer_bench.sh uses, made now
#           (make-model --fill blocks) into /tmp/peer_models
#   spec27  bench-spec on that pair (greedy: k = 3, 6, adaptive; sampled at
#           temperature 0.7, top-p 0.9: k = 6), with the step anatomy
#   batch6  6 concurrent streams through the services, speculation off vs on
#           (tests/gpu/batch_spec.sh on the pair27 pair; needs all four binaries)
#   lockstep6  batch6 with the coordinator's --lockstep on, then off (fixed k,
#           LOCKSTEP_SPEC_FLAGS, default "--k 4 --no-adaptive")
#   peerwait   waits (within PEERWAIT_S, default 420 s) for the peer build
# Carries: .gpu_carry (gpu_check + abseil; or packed as .devpack/gpucarry.tar.xz)
# and .devpack/devcarry.tar.xz (the product binaries and libraries,
# tests/gpu/make_carry.sh, packed to fit).
#   run(command="bash tests/gpu/device_round.sh check ipc spec", carry=[".gpu_carry", ".devpack"])
set -u
OUT=${OUT:-/tmp/round_out}
mkdir -p "$OUT"
root=$(pwd)
[ -d .devcarry ] || { [ -f .devpack/devcarry.tar.xz ] && tar -xJf .devpack/devcarry.tar.xz; }
[ -d .gpu_carry ] || { [ -f .devpack/gpucarry.tar.xz ] && tar -xJf .devpack/gpucarry.tar.xz; }
C=$root/.devcarry
S=$C/bin/specd
# The 27B-class pair of pair27 / spec27, named as tests/gpu/peer_bench.sh names it.
M27=/tmp/peer_models/qwen3-27b${RESIDUAL_GAIN:+-g$RESIDUAL_GAIN}-Q4_K_S-d6-Q4_K_M
t0=$(date +%s)
rc=0
stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
# spec_pairs TAG "BACKEND FLAGS" PRESET TYPE TOKENS: bench-spec on the trained
# pair (when carried) and on a derived pair of PRESET/TYPE with a 2-layer draft.
spec_pairs() {
  local tag=$1 flags=$2 preset=$3 type=$4 tokens=$5
  export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  local G="$flags --max-seqs 2 --max-seq-len 2048"
  # shellcheck disable=SC2086
  if [ -f "$C/models/pycode-target-10m-f16.gguf" ]; then
    stamp "bench-spec, trained pair, $tag"
    timeout 200 "$S" bench-spec $G --model "$C/models/pycode-target-10m-f16.gguf" \
      --draft "$C/models/pycode-draft-0.4m-f16.gguf" --max-tokens 128 --repeats 3 --ks 1,2,3,4,6,8 \
      > "$OUT/spec_pycode_$tag.txt" 2>&1
    echo "rc=$?"; tail -n 34 "$OUT/spec_pycode_$tag.txt"
  fi
  local P=/tmp/pair$preset
  [ -f $P/target.gguf ] || timeout 240 "$S" make-model --preset "$preset" --type "$type" --pair --draft-layers 2 \
    --out $P > "$OUT/make$preset.txt" 2>&1
  stamp "bench-spec, derived $preset $type pair, $tag"
  # shellcheck disable=SC2086
  timeout 200 "$S" bench-spec $G --model $P/target.gguf --draft $P/draft.gguf --max-tokens "$tokens" --repeats 3 \
    --ks 1,2,3,4,6 > "$OUT/spec_${preset}_$tag.txt" 2>&1
  echo "rc=$?"; tail -n 30 "$OUT/spec_${preset}_$tag.txt"
}
for stage in "$@"; do
  case $stage in
    check)
      stamp "check"
      OUT=$OUT/check CHECK_S=${CHECK_S:-200} bash tests/gpu/run_device.sh check || rc=1 ;;
    speccheck)
      stamp "gpu_check --spec"
      export LD_LIBRARY_PATH="$root/.gpu_carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
      timeout ${SPECCHECK_S:-150} "$root/.gpu_carry/bin/gpu_check" --spec > "$OUT/speccheck.log" 2>&1 || rc=1
      grep -E "^(FAIL|SUMMARY|  V=)|rror" "$OUT/speccheck.log" | head -40 ;;
    spechost)
      stamp "gpu_check --spec-host"
      export LD_LIBRARY_PATH="$root/.gpu_carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
      timeout ${SPECCHECK_S:-150} "$root/.gpu_carry/bin/gpu_check" --spec-host > "$OUT/spechost.log" 2>&1 || rc=1
      grep -E "^(FAIL|SUMMARY|  V=)|rror" "$OUT/spechost.log" | head -60 ;;
    pair27)
      # RESIDUAL_GAIN=0.05: the ~80%-acceptance pair (peer_bench.sh's naming);
      # batch6 / lockstep6 then run on it.
      M=$M27
      stamp "make-model 27B-class pair into $M"
      export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
      [ -f $M/target.gguf ] && [ -f $M/draft.gguf ] ||
        timeout 300 "$S" make-model --preset qwen3-27b --type Q4_K_S --fill blocks --sync=false --pair --draft-layers 6 \
          --draft-type Q4_K_M ${RESIDUAL_GAIN:+--residual-gain $RESIDUAL_GAIN} --out $M > "$OUT/pair27.txt" 2>&1 || rc=1
      export TARGET=$M/target.gguf DRAFT=$M/draft.gguf
      ls -la $M ;;
    spec27)
      M=$M27
      export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
      stamp "bench-spec 27B-class pair, greedy"
      timeout ${SPEC27_S:-150} "$S" bench-spec --backend cuda --max-seqs 1 --max-seq-len 2048 --model $M/target.gguf \
        --draft $M/draft.gguf --max-tokens 128 --repeats 1 --ks 3,6 > "$OUT/spec27_greedy.txt" 2>&1
      echo "rc=$?"; tail -n 30 "$OUT/spec27_greedy.txt"
      stamp "bench-spec 27B-class pair, sampled"
      timeout ${SPEC27_S:-150} "$S" bench-spec --backend cuda --max-seqs 1 --max-seq-len 2048 --model $M/target.gguf \
        --draft $M/draft.gguf --max-tokens 128 --repeats 1 --ks 6 --temperature 0.7 --top-p 0.9 \
        > "$OUT/spec27_sampled.txt" 2>&1
      echo "rc=$?"; tail -n 30 "$OUT/spec27_sampled.txt" ;;
    batch6)
      stamp "batched speculation through the services"
      OUT=$OUT/batch6 timeout ${BATCH_S:-420} bash tests/gpu/batch_spec.sh 2>&1 | tail -n 20 || rc=1 ;;
    lockstep6)
      # The coordinator's lockstep on and off, 6 streams, fixed k (default 4).
      for ls in true false; do
        stamp "six streams, --lockstep=$ls"
        OUT=$OUT/lockstep6_$ls COORD_FLAGS="--lockstep=$ls" SPEC_FLAGS="${LOCKSTEP_SPEC_FLAGS:---k 4 --no-adaptive}" \
          timeout ${BATCH_S:-420} bash tests/gpu/batch_spec.sh 2>&1 | tail -n 20 || rc=1
      done ;;
    peerwait)
      w0=$(date +%s)
      while [ ! -f /tmp/peer/done ] && [ $(( $(date +%s) - w0 )) -lt ${PEERWAIT_S:-420} ]; do sleep 5; done
      stamp "peer build: $(cat /tmp/peer/done 2>/dev/null || echo 'still running')"
      tail -n 3 /tmp/peer/build.log ;;
    bench)
      stamp "bench"
      OUT=$OUT/bench BENCH_S=${BENCH_S:-200} bash tests/gpu/run_device.sh bench || rc=1 ;;
    ipc)
      stamp "ipc"
      OUT=$OUT/ipc timeout ${IPC_S:-240} bash tests/gpu/ipc_device_check.sh 2>&1 | grep -E "^(PASS|FAIL|VERDICT|==)" || rc=1 ;;
    e2e)
      stamp "e2e bench"
      OUT=$OUT/e2e timeout ${E2E_S:-400} bash tests/gpu/e2e_device.sh bench 2>&1 | tail -n 80 ;;
    spec)
      spec_pairs cuda "--backend cuda" 1b Q4_K_M 128 ;;
    specs)
      spec_pairs cuda_sampled "--backend cuda --temperature 0.7 --top-p 0.9" 1b Q4_K_M 128 ;;
    cpuspec)
      spec_pairs cpu "--backend cpu --threads ${CPU_THREADS:-8}" 100m Q8_0 96 ;;
    bench27)
      export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
      B="$S bench --backend cuda --reps 10 --bandwidth-bytes 4GiB"
      for ctx in 64 4096; do
        stamp "bench 27B Q4_K_S ctx $ctx"
        timeout 240 $B --preset qwen3-27b --type Q4_K_S --kv-type q8_0 --ctx $ctx --prefill 256 --batches 1 \
          --verify-k 1,2,3,4,5,6,7,8 --json "$OUT/b27s_ctx$ctx.json" > "$OUT/b27s_ctx$ctx.txt" 2>&1
        echo "rc=$?"; grep -vE "^ts=" "$OUT/b27s_ctx$ctx.txt" | tail -n 24
      done
      stamp "bench 3B-class draft Q4_K_M ctx 4096"
      timeout 120 $B --preset qwen2.5-3b --type Q4_K_M --kv-type q8_0 --ctx 4096 --prefill 256 --batches 1 --verify-k 1,6 \
        > "$OUT/b3b.txt" 2>&1
      echo "rc=$?"; grep -vE "^ts=" "$OUT/b3b.txt" | tail -n 12 ;;
    ncustep)
      stamp "ncu: one 27B-class decode step"
      export LD_LIBRARY_PATH="$root/.gpu_carry/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
      ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
      timeout 300 "$ncu_bin" --clock-control none --cache-control none --profile-from-start off --metrics gpu__time_duration.sum --csv \
        "$root/.gpu_carry/bin/gpu_check" --profile-step > "$OUT/ncu_step.csv" 2> "$OUT/ncu_step.err"
      echo "rc=$?"
      python3 - "$OUT/ncu_step.csv" <<'PY'
import csv, sys, re, collections
rows = list(csv.reader(open(sys.argv[1])))
hdr = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
if hdr is None:
    print("no ncu rows"); sys.exit(0)
h = rows[hdr]; ki, mi, vi = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value")
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in rows[hdr + 1:]:
    if len(r) <= vi or r[mi] != "gpu__time_duration.sum": continue
    name = re.sub(r"\(.*", "", r[ki]); name = re.sub(r"<.*", "", name).split("::")[-1]
    v = float(r[vi].replace(",", "")); unit = 1.0
    tot[name] += v; cnt[name] += 1
all_ = sum(tot.values())
print(f"kernels {sum(cnt.values())}, sum of GPU times {all_/1e3:.1f} (unit as ncu reports: ns -> us)")
for k, v in sorted(tot.items(), key=lambda x: -x[1]):
    print(f"  {k:32s} n={cnt[k]:4d} total={v/1e3:9.1f} us  mean={v/cnt[k]/1e3:8.2f} us")
PY
      ;;
    peerbuild)
      if [ ! -x /tmp/peer/lcb/bin/llama-bench ] && [ ! -f /tmp/peer/started ]; then
        mkdir -p /tmp/peer && touch /tmp/peer/started
        setsid nohup bash -c "cd /tmp/peer && tar xJf '$root/.peer/llama.cpp-b0.3.36-cuda-src.tar.xz' &&
          for d in app pocs examples/training examples/sycl; do mkdir -p llama.cpp/\$d; touch llama.cpp/\$d/CMakeLists.txt; done &&
          cmake -S llama.cpp -B lcb -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF \
            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release &&
          cmake --build lcb -j12 --target llama-bench llama-speculative-simple llama-completion; echo rc=\$? > /tmp/peer/done" \
          > /tmp/peer/build.log 2>&1 < /dev/null &
        stamp "peer build started (detached)"
      else
        stamp "peer build: $(cat /tmp/peer/done 2>/dev/null || echo running)"
      fi ;;
    *) echo "unknown stage $stage"; rc=2 ;;
  esac
done
stamp "done rc=$rc"
exit $rc
