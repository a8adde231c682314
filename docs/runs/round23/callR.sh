#!/usr/bin/env bash
# Round 23 call R: register caps on the 5-8 and 9-16-column matvec kernels (docs/runs/round23/
# pack-regcap.sh). In one call:
#  1. gpu_check.k80k2 --matmul-only: every weight type's matvec against mmv::Emulate bit for bit and the
#     CPU backend, n = 1 .. 40 (a cap changes registers, not arithmetic);
#  2. specd bench of this tree and the capped builds ($BINS: this tree, k80, k80k2; the pack also holds
#     k88 and k2), alternating, twice (KV f16): batch 1 and 8 at
#     context 64 (verify 1, 4), verify 4 and 7 at 4200, batch 6 / 8 and six sequences' verify 4 at 1024;
#  3. if the call is young enough, profiles: ncu --set full of one layer's four matvecs (decode at 64,
#     the 7-token pass at 4096) and the draft's per-kernel GPU time in specd bench.
# Pack: bash docs/runs/round23/pack-regcap.sh, then
#   run(command="bash docs/runs/round23/callR.sh", carry=[".devpackR"], kind="nvidia-h200")
set -u
export DEVPACK=.devpackR/devcarry.tar.xz
rm -rf .devcarry  # a warm machine keeps the previous call's unpacked binaries
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
GPU_CHECK=gpu_check.k80k2 gpu_checks --matmul-only
wait $mkpid
for rep in 1 2; do
  for b in ${BINS:-specd specd.k80 specd.k80k2}; do
    stamp "$b (rep $rep): ctx 64 batch 1, 8, verify 1, 4 | ctx 4200 verify 4, 7 | ctx 1024 batch 6, 8, six sequences' verify 4"
    for args in "--ctx 64 --prefill 16 --batches 1,8 --verify-k 1,4" "--ctx 4200 --prefill 4096 --batches 1 --verify-k 4,7" \
      "--ctx 1024 --prefill 64 --batches 6,8 --verify-k 4 --verify-seqs 6"; do
      # shellcheck disable=SC2086
      bench_row "$b" $args
    done
  done
done
if before 300 ncu-mmv; then
  ncu_full mmvdec MmvKernel 40 4 1 1 64 f16
  ncu_full mmv7 MmvKernel 40 4 1 7 4096 f16
fi
if before 380 ncu-draft; then
  stamp "ncu: specd bench of the draft (decode at context 64), GPU time per kernel"
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)
  timeout 100 "$ncu" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    --print-units base "$C/bin/specd" bench --backend cuda --model "$M6/draft.gguf" --ctx 64 --prefill 16 \
    --batches 1 --verify-k 1 --reps 1 > "$O/ncu_draft.csv" 2> "$O/ncu_draft.err"
  echo "rc=$?"
  python3 tests/gpu/ncu_kernels.py "$O/ncu_draft.csv" --top 24
  xz -9 "$O/ncu_draft.csv"
fi
stamp done
bundle_out
