#!/usr/bin/env bash
# Round 35 call A: the warm-up (common/spec/warmup.h) on the ~80% pair in process, `specd generate` of 256
# tokens with --warmup auto / off (adaptive and k = 6, two reps each; the graphs' launches, captures and
# eager batches of each run); GAIN=1: then the side-by-side table with the tree's specd on the ~80% pair (~45 s),
# SIX=1: on the 6-layer pair too (~100 s).
#   pack: BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS=specd tests/gpu/make_carry.sh;
#         rm -f .devcarry/lib/{libssl.so.3,libcrypto.so.3,libstdc++.so.6}; mkdir -p .devpackA35
#         XZ_OPT=-9 tar -cJf .devpackA35/devcarry.tar.xz .devcarry
#   run(command="bash docs/runs/round35/callA.sh", carry=[".devpackA35", ".peer"])
set -u
export DEVPACK=${DEVPACK:-.devpackA35/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
peer_libs
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M8" --residual-gain 0.05
stamp "~80% pair in process, specd generate 256 tokens: --warmup auto / off"
P="The history of the city begins with a small harbour where fishermen"
for rep in 1 2; do
  for mode in adaptive k6; do
    for wu in auto off; do
      args=()
      [ "$mode" = adaptive ] || args=(--k "${mode#k}")
      timeout 60 "$C/bin/specd" generate --backend cuda --max-seqs 1 --max-seq-len 2048 --max-tokens 256 \
        --ignore-eos --prompt "$P" --model "$M8/target.gguf" --draft "$M8/draft.gguf" "${args[@]}" --warmup $wu \
        2>&1 > /dev/null | grep -E "tok/s|graphs:|warm-up" | sed "s/^/$mode warmup=$wu rep $rep: /"
    done
  done
done
if [ "${GAIN:-0}" = 1 ]; then
  stamp "peer_bench, ~80% pair, speculative rows"
  peer_run gain 150 RESIDUAL_GAIN=0.05 SPEC_ONLY=1 SPEC_NS="3 4 6"
fi
if [ "${SIX:-0}" = 1 ]; then
  make_pair "$M6"
  stamp "peer_bench, 6-layer pair"
  peer_run peer 240 SPEC_NS="3 6"
fi
stamp done
bundle_out
