#!/usr/bin/env bash
# Round 41 calls A and B in one (machines were scarce): gpu_check's Q4_K / Q5_K matmul checks of the tree
# (the wgmma wide kernel == mmv::Emulate bit for bit at n = 1..64), --bench-matvec and specd bench of the tree
# against HEAD before it (7f8e204: gpu_check.head, specd.head), then, if the checks passed, six streams
# (round 40's callS.sh: target-only, k = 4, adaptive and HEAD's adaptive from alt/bin alternating), then the
# prototype if time is left.
#   run(command="bash docs/runs/round41/callAB.sh", carry=[".devpackW41", ".devpackS44"])   (~9 min)
set -u
export DEVPACK=${DEVPACK:-.devpackW41/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
t00=$t0
exec > >(tee "$O/stdout.txt") 2>&1
CHECK_TYPES=Q4_K,Q5_K CHECK_TIMEOUT=${CHECK_S:-80} gpu_checks --matmul-only
ok=$(xz -dc "$O/check_matmul-only.log.xz" | grep -c '^FAIL')
[ "$(xz -dc "$O/check_matmul-only.log.xz" | grep -c '^PASS')" -gt 20 ] || ok="no passes"  # a crash passes none
for b in gpu_check gpu_check.head; do
  stamp "$b --bench-matvec"
  timeout 40 "$C/bin/$b" --bench-matvec > "$O/bench_matvec.$b.txt" 2>&1
  grep -E "Q4_K|Q5_K" "$O/bench_matvec.$b.txt" | head -16
done
make_pair "$M6"
bench_multi "${REPS:-1}" specd specd.head
if [ "$ok" = 0 ]; then
  left=$(( 560 - ($(date +%s) - t00) ))
  stamp "six streams (${left} s left)"
  OUT=$O/six KS=4 REPS_ADAPTIVE=${REPS_ADAPTIVE:-2} ALT_REPS=${ALT_REPS:-2} SIX_BEFORE=$(( left - 40 )) \
    bash docs/runs/round40/callS.sh > /dev/null 2>&1
  sed -n '/summary/,$p' "$O/six/stdout.txt" | head -12
  grep -hE "^  speculative steps" "$O"/six/stats/*.stats.txt | cut -c1-300
else
  stamp "gpu_check failed ($ok FAIL lines): no six streams"
fi
t0=$t00
if [ -x .devpackS44/proto_wgfold ] && before 540 prototype; then
  timeout 50 .devpackS44/proto_wgfold > "$O/proto.txt" 2>&1
  echo "rc=$?"
  cat "$O/proto.txt"
fi
stamp done
