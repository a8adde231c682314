#!/usr/bin/env bash
# Round 29, call S: the prompt slab sized from the model (Engine::PromptSlabBytes: the largest layer matrix
# in F16, 64-256 MiB; the 27B target's 262 MB FFN matrices in one GEMM each) against the tree's fixed
# 64 MiB (specd from .devpackP): prefill of 512 and 128 tokens (specd bench, --reps 2), alternating, three
# times; the memory plan against the driver's figure for both.
#   run(command="bash docs/runs/round29/callS.sh", carry=[".devpackP", ".devpackQ"])
set -u
export DEVPACK=.devpackP/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
tar -xJf .devpackQ/ps.tar.xz -C "$C"
make_pair "$M6"
for rep in 1 2 3; do
  for b in specd specd.ps; do
    stamp "$b (rep $rep): prefill 512, 128"
    for pf in "1100 512" "600 128"; do
      set -- $pf
      timeout 60 "$C/bin/$b" bench --backend cuda --model "$M6/target.gguf" --ctx "$1" --prefill "$2" --batches 1 \
        --verify-k 1 --reps 2 > "$O/b.log" 2>&1
      grep -E "^prefill" "$O/b.log" | tr '\n' '|'
      [ "$rep" = 1 ] && grep -oE "prompt_slab_mib=[0-9]+|process_bytes=[0-9]+ planned_bytes=[0-9]+" "$O/b.log" | tr '\n' ' '
    done
    echo
  done
done
stamp done
bundle_out
