#!/usr/bin/env bash
# Builds .devpackN34 for next-callN.sh: this tree's specd and specd.pin (next-bench-pin.patch: specd bench's
# logits buffer pinned), without gpu_check and the three libraries .peer's llama.cpp carries (the pack, the
# tree and .peer must stay under the 64-MiB carry limit).
set -euo pipefail
cd "$(dirname "$0")/../../.."
tests/gpu/pack_variants.sh .devpackN34 docs/runs/round34/next-bench-pin.patch \
  cli/cmd_bench.cc,common/backend/backend.h,common/backend/cuda/cuda_backend.cc,common/engine/engine.cc,common/engine/engine.h pin
rm -f .devcarry/bin/gpu_check .devcarry/lib/{libssl.so.3,libcrypto.so.3,libstdc++.so.6}
XZ_OPT=-9 tar -cJf .devpackN34/devcarry.tar.xz .devcarry
du -sh .devpackN34/devcarry.tar.xz
