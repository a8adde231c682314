#!/usr/bin/env bash
# Packs a CUDA build of llama.cpp (the peer, built as /work/shared/peer/README.md
# says) for tests/gpu/peer_bench.sh: llama-bench, llama-completion and
# llama-speculative-simple with the shared libraries they load, stripped and
# xz-compressed into .peer/llama-cuda.tar.xz (layout llama-cuda/{bin,lib}).
# Left out: the C runtime and the CUDA driver/runtime/cuBLAS/NCCL, which the
# device supplies (NCCL from its Python nvidia-nccl package: peer_bench.sh
# finds it).
#   tests/gpu/pack_peer.sh [LLAMA_BUILD_DIR]     (default /work/peer/lcb)
# Built on a machine without the CUDA driver (this one), the executables link
# against libggml-cuda, which needs libcuda.so.1: configure with
#   -DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,DIR
# where DIR holds a link libcuda.so.1 -> /usr/local/cuda/lib64/stubs/libcuda.so
# (about 35 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/../.."
lcb=${1:-/work/peer/lcb}
bins=(llama-bench llama-completion llama-speculative-simple)
for b in "${bins[@]}"; do
  [ -x "$lcb/bin/$b" ] || { echo "pack_peer: $lcb/bin/$b is missing (build it first)" >&2; exit 1; }
done
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/llama-cuda/bin" "$stage/llama-cuda/lib" .peer
for b in "${bins[@]}"; do cp "$lcb/bin/$b" "$stage/llama-cuda/bin/"; done
# Every library the binaries resolve (the build's own by rpath), minus the
# system C runtime and what the device's driver and CUDA toolkit provide;
# copied under the name ldd resolves (the soname), dereferenced.
for b in "${bins[@]}"; do
  LD_LIBRARY_PATH="$lcb/bin:${LD_LIBRARY_PATH:-}" ldd "$lcb/bin/$b" | awk '/=> \//{print $3}'
done | sort -u |
  grep -vE '/(libc|libm|libpthread|libdl|librt|libgcc_s|ld-linux[^/]*|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia[^/]*)[.-]' |
  while read -r lib; do cp -L "$lib" "$stage/llama-cuda/lib/"; done
strip "$stage/llama-cuda/bin/"* || true
strip --strip-unneeded "$stage/llama-cuda/lib/"*.so* 2>/dev/null || true
tar -C "$stage" -cf - llama-cuda | xz -9e -T0 > .peer/llama-cuda.tar.xz
ls -la "$stage/llama-cuda/bin" "$stage/llama-cuda/lib"
du -h .peer/llama-cuda.tar.xz
