#!/usr/bin/env bash
# Round 24 call A: fewer matvec ring slots (pack-stages.sh: specd.p3 / p2 paired, specd.c2 5-8 columns) and
# the attention split per KV type (this tree, runtime flag: f16 at 128 / 192 / 256 positions; Q8_0 is
# compiled for splits of 128 only). Pack: bash docs/runs/round24/pack-stages.sh, then
#   run(command="bash docs/runs/round24/callA.sh", carry=[".devpackA"])
set -u
export DEVPACK=.devpackA/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
CHECK_TIMEOUT=170 GPU_CHECK=gpu_check.p3 gpu_checks --matmul-only
for sp in 192 256; do
  stamp "gpu_check --attn-split $sp --attn-only"
  timeout 60 "$C/bin/gpu_check" --attn-split "$sp" --attn-only > "$O/check_attn$sp.log" 2>&1
  echo "rc=$?"; grep -E "^FAIL|SUMMARY" "$O/check_attn$sp.log" | head; xz -9 "$O/check_attn$sp.log"
done
wait $mkpid
for rep in 1 2; do
  for sp in 128 192 256; do
    stamp "specd (rep $rep), --cuda-attn-split $sp: ctx 4200 decode, verify 1, 4, 7 | six sequences' verify 4 at 1024"
    bench_row specd --ctx 4200 --prefill 4096 --batches 1 --verify-k 1,4,7 --cuda-attn-split "$sp"
    BENCH_TIMEOUT=40 bench_row specd --ctx 1024 --prefill 64 --batches 6 --verify-k 4 --verify-seqs 6 --cuda-attn-split "$sp"
  done
done
before 480 variants && CTX64_VERIFY=1,7 bench_against 2 specd specd.p3 specd.p2 specd.c2
stamp done
bundle_out
