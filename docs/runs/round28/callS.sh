#!/usr/bin/env bash
# Round 28 call S (pack: bash docs/runs/round28/pack-s.sh; run(command="bash docs/runs/round28/callS.sh",
# carry=[".devpackS"])): gpu_check of the tree (round 28's merge and quantizer landed together) and of
# next-attn-merge-kernel.patch (cm); then bench_against 2 / bench_multi 1 of the tree, specd.cm, the late
# triggers of RMSNorm and SwiGLU (l12) and the 5-8-column matvec at 72 registers (m72). (Packed but not run,
# the device budget being short after failed starts: specd.oq, specd.l1/l2/l4/l8.)
set -u
export DEVPACK=.devpackS/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
tar -xJf .devpackS/m72.tar.xz  # specd.m72: exp-mmv5-72.patch (the 5-8-column kernel at 72 registers)
tar -xJf .devpackS/cm.tar.xz   # specd.cm, gpu_check.cm: next-attn-merge-kernel.patch (the splits merged and quantized by a kernel of their own)
make_pair "$M6" & mkpid=$!
gpu_checks --attn-only --no-matmul
GPU_CHECK=gpu_check.cm gpu_checks --attn-only --no-matmul --spec
wait $mkpid
CTX64_VERIFY=1,7 bench_against 2 specd specd.cm specd.l12 specd.m72
before 440 bench_multi && bench_multi 1 specd specd.cm specd.l12 specd.m72
stamp done
bundle_out
