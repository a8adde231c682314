#!/usr/bin/env bash
# Round 39 call M: issue 12's "ahead on a mixed workload" on the GPU: `specd bench-spec` (its built-in mixed
# workload: four Python prompts, two prose, two noise, 128 tokens each, greedy) on the trained pycode pair of
# ../shared/models (carried as .devpackM39/models), with the pack's specd; then the CPU for comparison.
#   mkdir -p .devpackM39/models && cp ../shared/models/pycode-*.gguf .devpackM39/models/
#   run(command="DEVPACK=.devpackE38/devcarry.tar.xz bash docs/runs/round39/callM.sh",
#       carry=[".devpackE38", ".devpackM39"])   (~2 min)
set -u
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
P=.devpackM39/models
for rep in 1 2; do
  stamp "bench-spec cuda, rep $rep"
  timeout 200 "$C/bin/specd" bench-spec --backend cuda --max-seqs 2 --max-seq-len 2048 \
    --model "$P/pycode-target-10m-f16.gguf" --draft "$P/pycode-draft-0.4m-f16.gguf" \
    --max-tokens 128 --repeats 3 --ks 1,2,3,4,6 > "$O/bench_spec_cuda.$rep.txt" 2>&1
  echo "rc $?"; grep -E "^adaptive|best fixed|lossless" "$O/bench_spec_cuda.$rep.txt"
done
stamp done
bundle_out
