#!/usr/bin/env bash
# Round 23 call B: one shared-memory carveout for every step kernel (--cuda-smem-carveout 100) against the
# driver's per-kernel choice (-1, the default), and issue 11's side-by-side table of this tree.
# ncu of the decode's attention at context 64 (round 23 call Q8) showed 29k elapsed cycles of which an SM
# was active ~4.6k: the hypothesis is that the SMs drain to reconfigure L1/shared memory between the
# matvecs (a ~10 KiB ring) and the attention (74 KiB a block, three an SM), twice a layer, which also
# stops programmatic dependent launch from overlapping them. In one call:
#  1. gpu_check --attn-only of this tree (Q8_0 K/V kept as quants, round 23);
#  2. specd bench, default and carveout 100 (specd.c100, a wrapper), alternating, twice: the 6-layer
#     pair's target at context 64 and 4200, the draft (bench_against); six sequences (bench_multi);
#     KV Q8_0 at 4200 and 64;
#  3. issue 11's side-by-side table (tests/gpu/peer_bench.sh, llama.cpp from .peer/llama-cuda.tar.xz).
# The flag is not kept (slower; docs/PERFORMANCE.md "Round 23"): it ran at 56f6d99, now
# docs/runs/round23/exp-smem-carveout.patch. Pack: bash docs/runs/round23/pack.sh, then
#   run(command="bash docs/runs/round23/callB.sh", carry=[".devpackB", ".peer"], kind="nvidia-h200")
set -u
export DEVPACK=.devpackB/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
printf '#!/bin/sh\nexec "$(dirname "$0")/specd" "$@" --cuda-smem-carveout 100\n' > "$C/bin/specd.c100"
chmod +x "$C/bin/specd.c100"
make_pair "$M6" & mkpid=$!
gpu_checks --attn-only
wait $mkpid
bench_against 2 specd specd.c100
bench_multi 1 specd specd.c100
for b in specd specd.c100; do
  stamp "$b: KV q8_0 at 4200 (decode, verify 1, 4, 7); context 64"
  for args in "--ctx 4200 --prefill 4096 --batches 1 --verify-k 1,4,7" "--ctx 64 --prefill 16 --batches 1 --verify-k 1,4"; do
    # shellcheck disable=SC2086
    bench_row "$b" --kv-type q8_0 $args
  done
done
before 400 peer_bench && peer_table "this tree's specd"
stamp done
bundle_out
