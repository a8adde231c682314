#!/usr/bin/env bash
# Round 24 call C: register caps on the paired (decode) matvec now that two ring slots leave registers the
# limit on its warps an SM (pack-c.sh: specd.r64, specd.r72, specd.r72b), against this tree, alternating.
#   run(command="bash docs/runs/round24/callC.sh", carry=[".devpackQ"])
set -u
export DEVPACK=.devpackQ/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6"
CTX64_VERIFY=1,7 bench_against 2 specd specd.r64 specd.r72 specd.r72b
before 220 multi && bench_multi 1 specd specd.r64 specd.r72 specd.r72b
before 250 check && CHECK_TIMEOUT=40 GPU_CHECK=gpu_check.r72b gpu_checks --matmul-only
stamp done
bundle_out
