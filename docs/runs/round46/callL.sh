#!/usr/bin/env bash
# Round 46 call L (round 47 added the draft's questions): where do a speculative step's extra ~3 ms go?
# 1. The hand-off: a speculative step waits longer in the target worker (0.71 ms against 0.16 in a target-only
#    step, round 45) and at the lockstep gate (0.50 against 0.14): there the threads slept ~7 ms (the draft's
#    proposal) before they are woken, against ~1 ms in a target-only step. Modes: `qos` holds /dev/cpu_dma_latency
#    at 0 (tuned's latency-performance: no deep idle states); `spin` runs a nice-19 busy loop per core (no core
#    idles); `hspin` runs the workers of handoff-spin.patch (their hand-offs poll 20 ms before they sleep).
# 2. The draft's forwards: the services' quiet six-sequence proposal of four forwards (draft[6x4]) costs 6.98 ms,
#    where specd bench prices ~5.5 and in process (round 38) a forward costs what the bench says. `noshare`: the
#    draft loads its own copy instead of mapping the target's tensors (k = 4 only); `mps`: both workers under one
#    MPS server (no time-sliced switch between two CUDA contexts); the draft bench and an in-process
#    `generate --k 4` on the same pair first. (Cells at one sequence, draft[1] / draft[4], are steps of a stream
#    outside its cohort, whose forwards share the GPU with the cohort's verify: not comparable.)
# Six streams on the ~80% pair, target-only and k = 4 in each mode, fresh services each run; the workers' stats
# print the hand-off split ("hand-off a call: gather, start, back") and the draft's cells after each run.
# Pack: .devpackU46 from docs/runs/round46/prepare.sh (or .devpackU45 with DEVPACK=.devpackU45/devcarry.tar.xz:
# no hspin, no hand-off split).
#   run(command="bash docs/runs/round46/callL.sh", carry=[".devpackU46"])   (~8 min)
set -u
export DEVPACK=${DEVPACK:-.devpackU46/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
work_under /tmp/callL
exec > >(tee "$O/stdout.txt") 2>&1
[ -x "$C/bin/specd-coordinator.beside" ] && cp "$C/bin/specd-coordinator.beside" "$C/bin/specd-coordinator"
# The draft's forward alone, for the cells below (round 45: 1.094 / 1.233 / 1.383 ms at 1 / 4 / 6 sequences).
make_pair "$M8" --residual-gain 0.05
stamp "draft bench"
timeout 60 "$C/bin/specd" bench --backend cuda --model "$M8/draft.gguf" --batches 1,4,6 --verify-k 1 \
  --verify-seqs 6 --ctx 384 --prefill 64 --reps 20 2>&1 | tail -20 | tee "$O/draft_bench.txt"
# The same draft in process (one stream, k = 4, no CUDA IPC, one CUDA context): its cells against the services'.
# Round 38 (H100, in process): draft[1] 1.09 ms, draft[4] 4.29; round 45 (services): draft[1] 1.60, draft[4] 5.72.
stamp "in process: generate --k 4"
timeout 90 "$C/bin/specd" generate --backend cuda --max-seqs 1 --max-seq-len 2048 --max-tokens 256 --ignore-eos \
  --prompt "def quicksort(items):" --model "$M8/target.gguf" --draft "$M8/draft.gguf" --k 4 --no-adaptive \
  2> "$O/gen_k4.log" > /dev/null
echo "rc=$?"; grep -v '^ts=' "$O/gen_k4.log" | grep -E "step costs|per step|tok/s" | cut -c1-600
# ... and through the services, one stream alone (no cohort whose verify shares the GPU with its proposals).
stamp "services, one stream: k = 4"
OUT=$O/one RUNS=on STREAMS=1 REQUESTS=3 TOKENS=256 TARGET=$M8/target.gguf DRAFT=$M8/draft.gguf \
  SPEC_FLAGS="--k 4 --no-adaptive" timeout 100 bash tests/gpu/batch_spec.sh > "$O/one.txt" 2>&1
echo "rc=$?"; grep -hE "^  speculative steps|draft\[4\]=" "$O/one/on.stats.txt" 2> /dev/null | cut -c1-300
grep -hoE "draft\[[0-9x]+\]=[0-9.]+ms" "$O/one/on.stats.txt" 2> /dev/null | paste -sd' '
snap
handoff() { grep -hoE "^(target|draft): specd|hand-off a call: .*" "$O/six/$1/"*.stats.txt 2> /dev/null | paste -sd' '; }
# The draft's learned cost cells (quiet steps): per proposal of n forwards at m sequences, draft[mxn].
draft_cells() { grep -hoE "draft\[[0-9x]+\]=[0-9.]+ms" "$O/six/$1/"*.stats.txt 2> /dev/null | paste -sd' '; }
stamp "idle states"
cat /sys/devices/system/cpu/cpuidle/current_driver /sys/devices/system/cpu/cpuidle/current_governor* 2> /dev/null
for s in /sys/devices/system/cpu/cpu0/cpuidle/state*; do
  echo "$s: $(cat $s/name) latency $(cat $s/latency) us, used $(cat $s/usage)"
done 2> /dev/null
lscpu | grep -E "Model name|Hypervisor|^CPU\(s\)" 
idle_use() { for s in /sys/devices/system/cpu/cpu0/cpuidle/state*; do echo -n "$(cat $s/name)=$(cat $s/usage) "; done 2> /dev/null; echo; }
qos_on() { exec 9> /dev/cpu_dma_latency && printf '\x00\x00\x00\x00' >&9 && stamp "cpu_dma_latency held at 0: $(idle_use)"; }
qos_off() { stamp "cpu_dma_latency released: $(idle_use)"; exec 9>&-; }
spin_on() {
  spinners=()
  for _ in $(seq "$(nproc)"); do nice -n 19 bash -c 'while :; do :; done' & spinners+=($!); done
  stamp "$(nproc) nice-19 spinners on"
}
# mps: the two workers' kernels under one MPS server (no time-sliced switch between their CUDA contexts; the
# target's prefill and the draft's forwards may overlap). The daemon's pipes and logs under /tmp.
MPS=$(command -v nvidia-cuda-mps-control || ls /usr/local/nvidia/bin/nvidia-cuda-mps-control 2> /dev/null)
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps.pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps.log
mps_on() {
  mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
  timeout 20 "$MPS" -d && sleep 1 && stamp "MPS daemon started: $(echo get_server_list | timeout 5 "$MPS")"
}
mps_off() {
  echo quit | timeout 20 "$MPS"; sleep 2
  stamp "MPS daemon stopped; its log: $(tail -3 $CUDA_MPS_LOG_DIRECTORY/control.log 2> /dev/null | paste -sd' ')"
}
spin_off() { kill "${spinners[@]}" 2> /dev/null; wait "${spinners[@]}" 2> /dev/null; stamp "spinners off"; }
# hspin: the workers of handoff-spin.patch (.devpackU46), their threads polling 20 ms before they sleep.
hspin=0
if [ -x "$C/bin/specd-target-worker.spin" ]; then
  hspin=1
  for w in target draft; do cp "$C/bin/specd-$w-worker" "$C/bin/specd-$w-worker.main"; done
fi
workers() { for w in target draft; do cp "$C/bin/specd-$w-worker.$1" "$C/bin/specd-$w-worker"; done; }
qos=1
[ -w /dev/cpu_dma_latency ] || { stamp "no writable /dev/cpu_dma_latency: no qos runs"; qos=0; }
for rep in 1 2; do
  order="plain noshare mps hspin qos spin"
  [ $rep = 2 ] && order="spin qos hspin mps noshare plain"
  for q in $order; do
    [ $q = qos ] && [ $qos = 0 ] && continue
    [ $q = hspin ] && [ $hspin = 0 ] && continue
    [ $q = mps ] && [ -z "$MPS" ] && { stamp "no nvidia-cuda-mps-control: no mps runs"; continue; }
    before $(( rep == 1 ? ${LAST_START:-430} : 470 )) "rep $rep $q" || break 2
    [ $q = qos ] && qos_on
    [ $q = mps ] && { mps_on || { stamp "MPS did not start"; mps_off; continue; }; }
    [ $q = spin ] && spin_on
    flags=""
    [ $q = hspin ] && workers spin && flags="--handoff-spin-us 20000"
    if [ $q = noshare ]; then
      # The draft with its own copy of the tensors it maps from the target (2.12 GiB): are its forwards slower on
      # the target's mapped memory? (Round 45: draft[6x4] 6.98 ms, where specd bench prices ~5.5 with its copies.)
      six_streams "k4.$q.$rep" 4 "" "--share-weights off"
    else
      six_streams "off.$q.$rep" 0 "$flags"
      handoff "off.$q.$rep"
      six_streams "k4.$q.$rep" 4 "$flags"
    fi
    handoff "k4.$q.$rep"
    draft_cells "k4.$q.$rep"
    [ $q = hspin ] && workers main
    [ $q = qos ] && qos_off
    [ $q = mps ] && mps_off
    [ $q = spin ] && spin_off
    snap
  done
done
stamp done
snap
