#!/usr/bin/env bash
# Round 29, call U: ncu --set full of the wide matvec (17-32 columns) in the six sequences' verify of 5
# tokens at 1024 (issue 12's six streams are bound by it: where its time goes); two wide-kernel experiments
# (pack-w.sh: specd.w3 L2 requests two groups ahead, specd.w4 one GroupK over the four column tiles); round
# 28's prepared attention variants (docs/runs/round28/next-callU.sh: gpu_check and benches of the split
# kernel's positions before the wait, the merge kernel's short rows, the split kernel's late trigger).
#   run(command="bash docs/runs/round29/callU.sh", carry=[".devpackU", ".devpackW"])
set -u
export DEVPACK=.devpackU/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
tar -xJf .devpackW/wide.tar.xz -C "$C"
make_pair "$M6" & mkpid=$!
ncu_full wide MmvKernelWide 8 4 6 5 1024 f16
GPU_CHECK=gpu_check.pe gpu_checks --attn-only --no-matmul
GPU_CHECK=gpu_check.ms gpu_checks --attn-only --no-matmul
wait $mkpid
bench_multi 1 specd specd.w3 specd.w4
before 330 attn && CTX64_VERIFY=1,7 bench_against 1 specd specd.pe specd.ms specd.al1 specd.al2
before 480 multi2 && bench_multi 1 specd specd.w3 specd.w4 specd.ms
stamp done
bundle_out
