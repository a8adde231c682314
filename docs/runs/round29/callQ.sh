#!/usr/bin/env bash
# Round 29, call Q: the prefill's dequantized F16 slab sized to stay in L2. The prompt path dequantizes each
# matrix's rows into a 64 MiB F16 slab, then cuBLAS reads it back: at 128 tokens that round trip through DRAM
# (~111 GB for the 27B target) is about half the prefill. specd.slab (exp-slab.patch) reads the slab's size
# from SPECD_EXP_SLAB_MB; prefill of 128 and 512 tokens (specd bench, --reps 2) at 64 / 32 / 24 / 16 MiB,
# alternating, twice.
#   run(command="bash docs/runs/round29/callQ.sh", carry=[".devpackP", ".devpackQ"])
set -u
export DEVPACK=.devpackP/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
tar -xJf .devpackQ/slab.tar.xz -C "$C"
make_pair "$M6"
for rep in 1 2; do
  for mb in 64 32 24 16; do
    stamp "slab $mb MiB (rep $rep): prefill 512, 128"
    for pf in "1100 512" "600 128"; do
      set -- $pf
      SPECD_EXP_SLAB_MB=$mb timeout 60 "$C/bin/specd.slab" bench --backend cuda --model "$M6/target.gguf" --ctx "$1" \
        --prefill "$2" --batches 1 --verify-k 1 --reps 2 2>&1 | grep -E "^prefill" | tr '\n' '|'
    done
    echo
  done
done
stamp done
bundle_out
