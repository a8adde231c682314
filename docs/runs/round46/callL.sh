#!/usr/bin/env bash
# Round 46 call L: is a speculative step's extra hand-off time the host's wake-up latency?
# A speculative step waits longer in the target worker (0.71 ms against 0.16 in a target-only step, round 45) and
# at the lockstep gate (0.50 against 0.14): there the threads slept ~7 ms (the draft's proposal) before they are
# woken, against ~1 ms in a target-only step. Deeper idle states take longer to leave. This call holds
# /dev/cpu_dma_latency at 0 (what tuned's latency-performance profile does: no deep idle states) around half of
# the runs, and around others runs one nice-19 busy loop per core (no core ever idles: a woken thread preempts a
# spinner at once), and with the workers of handoff-spin.patch (hspin: their hand-offs poll 20 ms before they
# sleep): six streams on the ~80% pair, target-only and k = 4, plain / hspin / spin / qos, same workers
# (.devpackU46 from docs/runs/round46/prepare.sh: main, whose workers take their wait apart, "hand-off a call" in
# the stats; or .devpackU45 with DEVPACK=.devpackU45/devcarry.tar.xz, its `beside` coordinator = main then).
#   run(command="bash docs/runs/round46/callL.sh", carry=[".devpackU46"])   (~8 min)
set -u
export DEVPACK=${DEVPACK:-.devpackU46/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
work_under /tmp/callL
exec > >(tee "$O/stdout.txt") 2>&1
[ -x "$C/bin/specd-coordinator.beside" ] && cp "$C/bin/specd-coordinator.beside" "$C/bin/specd-coordinator"
handoff() { grep -hoE "^(target|draft): specd|hand-off a call: .*" "$O/six/$1/"*.stats.txt 2> /dev/null | paste -sd' '; }
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
  order="plain hspin spin qos"
  [ $rep = 2 ] && order="qos spin hspin plain"
  for q in $order; do
    [ $q = qos ] && [ $qos = 0 ] && continue
    [ $q = hspin ] && [ $hspin = 0 ] && continue
    before $(( rep == 1 ? ${LAST_START:-400} : 470 )) "rep $rep $q" || break 2
    [ $q = qos ] && qos_on
    [ $q = spin ] && spin_on
    flags=""
    [ $q = hspin ] && workers spin && flags="--handoff-spin-us 20000"
    six_streams "off.$q.$rep" 0 "$flags"
    handoff "off.$q.$rep"
    six_streams "k4.$q.$rep" 4 "$flags"
    handoff "k4.$q.$rep"
    [ $q = hspin ] && workers main
    [ $q = qos ] && qos_off
    [ $q = spin ] && spin_off
    snap
  done
done
stamp done
snap
