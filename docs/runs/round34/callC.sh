#!/usr/bin/env bash
# Round 34 call C: the landed tree's gpu_check (the wide matvec's fold a part at a time): --matmul-only over
# every packed type (each kernel == mmv::Emulate bit for bit at n = 1..40, against the CPU), then --spec.
#   run(command="bash docs/runs/round34/callC.sh", carry=[".devpackI34"])   (pack-i.sh builds it)
#   (CHECK_TYPES=...: those types only; MATMUL_S: its limit, 230; SPEC=0: no --spec)
set -u
export DEVPACK=${DEVPACK:-.devpackI34/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
CHECK_TIMEOUT=${MATMUL_S:-230} gpu_checks --matmul-only
[ "${SPEC:-1}" = 1 ] && CHECK_TYPES= CHECK_TIMEOUT=100 gpu_checks --spec
stamp done
bundle_out
