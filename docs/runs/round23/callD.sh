#!/usr/bin/env bash
# Round 23 call D: profiles for the next round's matvec and draft work (no change measured).
#  1. ncu --set full of one layer's four matvecs (q/k/v, o, gate/up, down: the 11th layer's) in the
#     decode step at context 64 (the paired kernel) and in the 7-token pass at 4096 (the 5-8-column one);
#  2. per-kernel GPU time of `specd bench` on the 6-layer draft (decode at context 64), summed per kernel.
# Pack: bash docs/runs/round23/pack.sh, then
#   run(command="bash docs/runs/round23/callD.sh", carry=[".devpackB"], kind="nvidia-h200")
set -u
export DEVPACK=.devpackB/devcarry.tar.xz
rm -rf .devcarry  # a warm machine keeps the previous call's unpacked binaries
. tests/gpu/device_lib.sh
device_setup
make_pair "$M6" & mkpid=$!
ncu_full mmvdec MmvKernel 40 4 1 1 64 f16
ncu_full mmv7 MmvKernel 40 4 1 7 4096 f16
wait $mkpid
stamp "ncu: specd bench of the draft (decode at context 64), GPU time per kernel"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)
timeout 200 "$ncu" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
  --print-units base "$C/bin/specd" bench --backend cuda --model "$M6/draft.gguf" --ctx 64 --prefill 16 \
  --batches 1 --verify-k 1 --reps 1 > "$O/ncu_draft.csv" 2> "$O/ncu_draft.err"
echo "rc=$?"
python3 tests/gpu/ncu_kernels.py "$O/ncu_draft.csv" --top 24
xz -9 "$O/ncu_draft.csv"
stamp done
bundle_out
