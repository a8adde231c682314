#!/usr/bin/env bash
# round 11 call F (one-off): one stream through the three services on the ~80% pair with the final build
# (adaptive, then k=4): re-measuring the step overhead that call C found at 1.4-2.0 ms
set -u
O=/tmp/r11f; mkdir -p $O; R=${OUT:-/tmp/r11f_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
[ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
M=/tmp/peer_models/qwen3-27b-g0.05-Q4_K_S-d6-Q4_K_M
[ -f $M/target.gguf ] || OUT=$O/round RESIDUAL_GAIN=0.05 timeout 60 bash tests/gpu/device_round.sh pair27 > $O/round.log 2>&1
export TARGET=$M/target.gguf DRAFT=$M/draft.gguf
stamp "one stream through the services, adaptive"
OUT=$O/s1ad STREAMS=1 REQUESTS=4 TOKENS=256 timeout 90 bash tests/gpu/batch_spec.sh 2>&1 | tail -n 7
grep -h "request finished" $O/s1ad/on.coord.log | grep -o "tok_s=[0-9.]*\|overhead_ms_per_step=[0-9.]*\|transport_ms_per_step=[0-9.]*\|wait_ms_per_step=[0-9.]*" | paste - - - -
stamp "one stream through the services, k=4"
OUT=$O/s1k4 STREAMS=1 REQUESTS=4 TOKENS=256 SPEC_FLAGS="--k 4 --no-adaptive" timeout 80 bash tests/gpu/batch_spec.sh 2>&1 | tail -n 7
grep -h "request finished" $O/s1k4/on.coord.log | grep -o "tok_s=[0-9.]*\|overhead_ms_per_step=[0-9.]*\|transport_ms_per_step=[0-9.]*\|wait_ms_per_step=[0-9.]*" | paste - - - -
stamp done
tar -czf $R/r11f.tgz -C $O .
