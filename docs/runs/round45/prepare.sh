#!/usr/bin/env bash
# Rebuilds round 45's packs in a fresh workspace (a new checkout keeps neither builds nor packs):
#   .devpackU45  the services, specd and four coordinators (tree / beside / slack / beside-slack) for callU.sh
#   .devpackQ45  specd alone, libssl / libcrypto / libstdc++ left out (peer_libs has them), for the side-by-side
#                calls with .peer
#   .peer/llama-cuda.tar.xz  llama.cpp 0.3.36 (../shared/peer) built for sm_90 and packed (tests/gpu/pack_peer.sh)
#   bash docs/runs/round45/prepare.sh [u|q|peer]...   (default: all three; ~15 + 5 + 40 min on 2 cores)
# The tree must be clean (the coordinators are built from patched copies of its files, restored after).
set -euo pipefail
. "$(dirname "$0")/../../../tests/gpu/pack_env.sh"
deploy/install-deps.sh --test > /dev/null
B=build-cuda
carry() {
  BUILD_DIR=$B CARRY_MODELS=0 CARRY_BINS="specd specd-coordinator specd-draft-worker specd-target-worker" \
    tests/gpu/make_carry.sh > /dev/null
}
pack_u() {
  git diff --quiet || { echo "prepare: the tree has local changes" >&2; exit 2; }
  carry
  local beside_files="common/spec/chain.cc common/spec/chain.h common/spec/loop.cc common/spec/loop.h \
common/spec/ngram.h common/spec/proposer.h coordinator/grpc_clients.h"
  build() {
    ninja -C $B specd-coordinator > /dev/null
    strip -o ".devcarry/bin/specd-coordinator.$1" $B/coordinator/specd-coordinator
  }
  # shellcheck disable=SC2086
  restore() { git checkout HEAD -- $beside_files coordinator/frontend.cc; }
  trap restore EXIT
  build beside
  git apply --include='common/*' --include='coordinator/*' docs/runs/round45/tail-slack.patch
  build beside-slack
  restore
  # The tree without the draft's open beside the target's prefill (e136a1f..7c2a28e reversed, the rest of
  # this tree kept).
  # shellcheck disable=SC2086
  unbeside() { git diff e136a1f^ 7c2a28e -- $beside_files | git apply -R; }
  unbeside
  git apply --include='common/*' --include='coordinator/*' docs/runs/round45/tail-slack.patch
  build slack
  restore
  unbeside
  build tree
  restore
  trap - EXIT
  ninja -C $B specd-coordinator > /dev/null
  mkdir -p .devpackU45
  XZ_OPT=-9 tar -cJf .devpackU45/devcarry.tar.xz .devcarry
  du -sh .devpackU45/devcarry.tar.xz
}
pack_q() {
  [ -x .devcarry/bin/specd ] || carry
  local st
  st=$(mktemp -d)
  mkdir -p "$st/.devcarry/bin" .devpackQ45
  cp -r .devcarry/lib "$st/.devcarry/"
  cp .devcarry/bin/specd "$st/.devcarry/bin/"
  rm -f "$st/.devcarry/lib/"{libssl.so.3,libcrypto.so.3,libstdc++.so.6}
  (cd "$st" && XZ_OPT=-9 tar -cJf - .devcarry) > .devpackQ45/devcarry.tar.xz
  rm -rf "$st"
  du -sh .devpackQ45/devcarry.tar.xz
}
pack_llama() {
  local w=/work/peer
  mkdir -p $w/stub
  [ -d $w/llama.cpp ] || tar -C $w -xJf ../shared/peer/llama.cpp-b0.3.36-cuda-src.tar.xz
  for d in app pocs examples/training examples/sycl; do
    mkdir -p $w/llama.cpp/$d
    touch $w/llama.cpp/$d/CMakeLists.txt
  done
  # Links against libggml-cuda, which needs libcuda.so.1: the toolkit's stub (no driver here).
  ln -sf /usr/local/cuda/lib64/stubs/libcuda.so $w/stub/libcuda.so.1
  cmake -S $w/llama.cpp -B $w/lcb -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$w/stub > /dev/null
  cmake --build $w/lcb -j"$(nproc)" --target llama-bench llama-speculative-simple llama-completion > /dev/null
  tests/gpu/pack_peer.sh $w/lcb
}
for what in "${@:-u q peer}"; do
  for w in $what; do
    case $w in
      u) pack_u ;;
      q) pack_q ;;
      peer) pack_llama ;;
      *) echo "prepare: unknown pack $w (u, q, peer)" >&2; exit 2 ;;
    esac
  done
done
