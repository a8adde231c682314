#!/usr/bin/env bash
# Round 41 call W: the wide matvec's fold on wgmma, prototype (proto_wgfold.cu, built here with
#   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o .devpackS44/proto_wgfold proto_wgfold.cu)
# against the lean mma.sync arithmetic in the same harness and the product's kernels (gpu_check --bench-matvec);
# then the six streams with this tree (round 40's callS.sh, KS / REPS_ADAPTIVE as given).
#   run(command="bash docs/runs/round41/callW.sh", carry=[".devpackS44"])   (~6 min)
set -u
export DEVPACK=${DEVPACK:-.devpackS44/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
mkdir -p "$O/w"
stamp "prototype (wgmma fold)"
timeout 120 .devpackS44/proto_wgfold 2>&1 | tee "$O/w/proto.txt"
stamp "gpu_check --bench-matvec (the product's kernels)"
timeout 90 "$C/bin/gpu_check" --bench-matvec 2>&1 | tee "$O/w/bench_matvec.txt" | grep -E "Q4_K|Q5_K" | head -40
stamp "six streams"
[ "${SIX:-1}" = 1 ] && KS=${KS:-4} REPS_ADAPTIVE=${REPS_ADAPTIVE:-3} SIX_BEFORE=${SIX_BEFORE:-400} OUT=$O/six \
  bash docs/runs/round40/callS.sh
stamp done
