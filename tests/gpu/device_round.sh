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
# Carries: .gpu_carry (gpu_check + abseil) and .devpack/devcarry.tar.xz (the
# product binaries and libraries, tests/gpu/make_carry.sh, packed to fit).
#   run(command="bash tests/gpu/device_round.sh check ipc spec", carry=[".gpu_carry", ".devpack"])
set -u
OUT=${OUT:-/tmp/round_out}
mkdir -p "$OUT"
root=$(pwd)
[ -d .devcarry ] || { [ -f .devpack/devcarry.tar.xz ] && tar -xJf .devpack/devcarry.tar.xz; }
C=$root/.devcarry
S=$C/bin/specd
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
    *) echo "unknown stage $stage"; rc=2 ;;
  esac
done
stamp "done rc=$rc"
exit $rc
