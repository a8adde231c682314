#!/usr/bin/env bash
# Round 15 call A: the paired matvec (decode, verifies of 1-3 drafts) with the activations staged in its
# ring slots (specd: main's slot counts; specd.xb: slots budgeted with the stage), round 14's prepared
# attention patch alone (specd.attn; also in specd and specd.xb), against main (specd.base).
# gpu_check --matmul-only (kernel == host emulation bit for bit, n = 1..40) and --no-matmul.
# Builds (experiment only, none kept): specd = exp-xstage.patch + round 14's next-attn-staged-quant.patch;
# specd.xb = the same with the paired kernel's slots budgeted with the stage (MmvStages: 10240 / (rec +
# XsBytes(1))); specd.attn = the attention patch alone. Result: all slower or neutral (PERFORMANCE.md round 15).
set -u
# (Run with the loops that tests/gpu/device_lib.sh now holds as gpu_checks and bench_against: equivalent
# commands.)
. tests/gpu/device_lib.sh
device_setup
make_pair $M6 & mkpid=$!
gpu_checks --matmul-only --no-matmul
stamp "gpu_check --bench-matvec"
timeout 60 $C/bin/gpu_check --bench-matvec > $O/bench_matvec.log 2>&1; echo "rc=$?"
tail -30 $O/bench_matvec.log
wait $mkpid
CTX64_VERIFY=1,3,4 bench_against 2 specd.base specd.attn specd specd.xb
stamp done
