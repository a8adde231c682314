#!/usr/bin/env bash
# Round 41 call A: the wgmma wide matvec (Q4_K / Q5_K, 17-32 columns) in the product, against this tree's
# HEAD before it (7f8e204, the pack's specd.head / gpu_check.head and alt/bin): the prototype
# (.devpackS44/proto_wgfold), gpu_check's matmul checks of Q4_K and Q5_K (every kernel == mmv::Emulate bit for
# bit at n = 1..64), --bench-matvec of both builds, specd bench of both (batch 6 / 8, six sequences' verify 4 at
# 1024, verify 6 at 4200; the 6-layer pair's target).
#   pack: tests/gpu/make_carry.sh of the tree (CARRY_BINS: the four binaries and gpu_check), then HEAD's
#         binaries into .devcarry/alt/bin and as specd.head / gpu_check.head; XZ_OPT=-9 tar -cJf .devpackW41/...
#   run(command="bash docs/runs/round41/callA.sh", carry=[".devpackW41", ".devpackS44"])   (~5 min)
set -u
export DEVPACK=${DEVPACK:-.devpackW41/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
if [ -x .devpackS44/proto_wgfold ]; then
  stamp "prototype (wgmma fold)"
  timeout 90 .devpackS44/proto_wgfold > "$O/proto.txt" 2>&1
  echo "rc=$?"
  cat "$O/proto.txt"
fi
CHECK_TYPES=Q4_K,Q5_K CHECK_TIMEOUT=${CHECK_S:-100} gpu_checks --matmul-only
for b in gpu_check gpu_check.head; do
  stamp "$b --bench-matvec"
  timeout 60 "$C/bin/$b" --bench-matvec > "$O/bench_matvec.$b.txt" 2>&1
  grep -E "Q4_K|Q5_K" "$O/bench_matvec.$b.txt" | head -24
done
make_pair "$M6"
bench_multi "${REPS:-2}" specd specd.head
stamp done
