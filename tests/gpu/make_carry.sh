#!/usr/bin/env bash
# Builds what the device run needs here (sm_90, Release) and gathers it in
# .devcarry/: the binaries, every shared library they need that is not part
# of the C runtime or the CUDA driver/toolkit (the device supplies those),
# and the trained model pair from ../shared/models when present.
# CARRY_BINS picks the binaries (default: the four services and CLI; gpu_check
# builds the tests too), CARRY_MODELS=0 leaves the models out (a call's carry
# is 64 MiB in all).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${BUILD_DIR:-build-dev}
BINS=${CARRY_BINS:-specd specd-coordinator specd-draft-worker specd-target-worker}
tests=OFF
case " $BINS " in *" gpu_check "*) tests=ON ;; esac
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DSPECD_BUILD_TESTS=$tests >/dev/null
# shellcheck disable=SC2086
cmake --build "$B" -j"${JOBS:-2}" --target $BINS
rm -rf .devcarry
mkdir -p .devcarry/bin .devcarry/lib
for b in $BINS; do
  case $b in
    specd) cp "$B/cli/specd" .devcarry/bin/ ;;
    specd-coordinator) cp "$B/coordinator/specd-coordinator" .devcarry/bin/ ;;
    specd-draft-worker) cp "$B/draft_worker/specd-draft-worker" .devcarry/bin/ ;;
    specd-target-worker) cp "$B/target_worker/specd-target-worker" .devcarry/bin/ ;;
    gpu_check) cp "$B/tests/gpu/gpu_check" .devcarry/bin/ ;;
    *) echo "make_carry: unknown binary $b" >&2; exit 2 ;;
  esac
done
strip .devcarry/bin/* || true
for b in .devcarry/bin/*; do
  ldd "$b" | awk '/=> \//{print $3}'
done | sort -u | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux|libcuda|libcudart|libcublas|libcublasLt)[.-]' |
  while read -r lib; do cp -L "$lib" .devcarry/lib/; done
strip --strip-unneeded .devcarry/lib/* 2>/dev/null || true
if [ "${CARRY_MODELS:-1}" = 1 ] && [ -d ../shared/models ]; then
  mkdir -p .devcarry/models
  cp ../shared/models/*.gguf .devcarry/models/
fi
du -sh .devcarry .devcarry/*
