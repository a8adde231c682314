#!/usr/bin/env bash
# Builds the GGUF fuzzer with clang (libFuzzer + ASan + UBSan) in its own build
# directory and runs it for a bounded time; exits non-zero on any crash.
#   tests/fuzz/run_fuzz.sh [BUILD_DIR]     default: build-fuzz (at the repo root)
#   FUZZ_SECONDS=60  FUZZ_JOBS=2 (build parallelism)
# Only tests/fuzz is configured (it compiles common/gguf itself), so fuzzing
# does not depend on gRPC or on the state of the other modules. Crashing
# inputs land in BUILD_DIR/artifacts/; new corpus entries in BUILD_DIR/corpus/
# (the committed seeds in tests/fuzz/corpus/ are only read).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${1:-$root/build-fuzz}
seconds=${FUZZ_SECONDS:-60}

export CC=clang CXX=clang++
cmake -S "$root/tests/fuzz" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build "$build" --target gguf_fuzz -j"${FUZZ_JOBS:-2}"

mkdir -p "$build/corpus" "$build/artifacts"
echo "run_fuzz: fuzzing gguf for ${seconds}s (corpus $build/corpus + $root/tests/fuzz/corpus)"
rc=0
"$build/gguf_fuzz" \
  -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
  -dict="$root/tests/fuzz/gguf.dict" -artifact_prefix="$build/artifacts/" -print_final_stats=1 \
  "$build/corpus" "$root/tests/fuzz/corpus" || rc=$?
if [ "$rc" -ne 0 ]; then
  echo "run_fuzz: FAILED (exit $rc); reproducer(s):" >&2
  ls -1 "$build/artifacts" >&2 || true
  exit "$rc"
fi
echo "run_fuzz: no crashes in ${seconds}s"
