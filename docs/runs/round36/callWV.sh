#!/usr/bin/env bash
# Round 36 calls W and V in one device call (device starts were scarce): callW.sh's warm-up A/B in process
# (SIX=0), then callV.sh's bench of the 5-8-column matvec variants, then (time allowing) six streams through
# the services with the coordinator's warm-up off / on (adaptive). gpu_check of a variant that wins runs with
# the side-by-side table (callP.sh) once it is in the tree.
#   pack: bash docs/runs/round36/pack.sh
#   run(command="bash docs/runs/round36/callWV.sh", carry=[".devpackR36"])   (~7 min)
set -u
export DEVPACK=${DEVPACK:-.devpackR36/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
OUT=$O/w SIX=0 bash docs/runs/round36/callW.sh 2>&1 | grep -vE "^NVIDIA"
export DEVPACK=  # unpacked once
exec > >(tee "$O/stdout.txt") 2>&1
make_pair "$M6"
CTX64_VERIFY=1,3,4,6 DEPTH_VERIFY=1,3,4,6,7 bench_against "${BENCH_REPS:-2}" specd specd.r96 specd.s3 specd.r96s3
# The six streams' draft forwards ran 1.54 ms each (round 35, draft[6x4]) where one sequence's run 0.87:
# the draft alone at batch 1 / 6 and six sequences' 2-token catch-up, KV Q8_0 as the services.
# The 5-8-column kernel's spills are Q6_K's worst (the draft's output head): the variants too.
for b in specd specd.r96 specd.r96s3; do
  stamp "$b draft: batch 1, 6; six sequences x 2 tokens (KV q8_0)"
  timeout 40 "$C/bin/$b" bench --backend cuda --model "$M6/draft.gguf" --ctx 256 --prefill 64 --batches 1,6 \
    --verify-k 1 --verify-seqs 6 --kv-type q8_0 --reps 5 > "$O/draft6.$b.txt" 2>&1
  sed -n '/^decode/,$p' "$O/draft6.$b.txt" | grep "^ "
done
if before "${SIX_BEFORE:-400}" "six streams"; then
  SETS="nowarm new" MODES="adaptive" REPS=1 OUT=$O/six bash docs/runs/round17/callCohort.sh 2>&1 | grep -vE "^NVIDIA"
fi
stamp done
bundle_out
