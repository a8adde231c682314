#!/usr/bin/env bash
# Installs what the tests need (Debian packages + Python test references),
# builds everything (the CUDA backend too when a toolkit is present) with
# warnings as errors, runs the whole test suite, then a bounded fuzz run of
# the GGUF parser under ASan/UBSan. GPU tests skip (and say so) without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
export BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}

deploy/install-deps.sh --test
[ -x /usr/local/cuda/bin/nvcc ] && export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B "$BUILD_DIR" -G Ninja -DSPECD_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD_DIR" -j"$JOBS"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"${CTEST_JOBS:-2}" --timeout 900
FUZZ_SECONDS=${FUZZ_SECONDS:-60} tests/fuzz/run_fuzz.sh "${BUILD_DIR}-fuzz"
echo "specd: all tests passed"
