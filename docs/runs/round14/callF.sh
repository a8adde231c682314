#!/usr/bin/env bash
# Round 14 call F: six speculative streams through the three services (k = 4, ~80% pair) against six
# target-only streams; run twice (callF: the call-E build, callF_base: main's binaries). The last stage
# (bench at 4200) was added for a third run, with the final build, that had no device time left.
set -u
# (The preamble moved to tests/gpu/device_lib.sh after the run: the same commands.)
. tests/gpu/device_lib.sh
device_setup
make_pair $M8 --residual-gain 0.05
stamp "six streams through the services, k = 4, ~80% pair"
OUT=$O/s6k4 TARGET=$M8/target.gguf DRAFT=$M8/draft.gguf TOKENS=256 SPEC_FLAGS="--k 4 --no-adaptive" timeout 240 bash tests/gpu/batch_spec.sh 2>&1 | tail -n 14
stamp "decode batch 1, 8 and verify k 4, 7 at 4200 (the ~80% pair's target: the same shape and types)"
timeout 60 $C/bin/specd bench --backend cuda --model $M8/target.gguf --ctx 4200 --prefill 4096 --batches 1,8 --verify-k 4,7 --reps 5 > $O/bench.txt 2>&1
sed -n '/^decode/,$p' $O/bench.txt | grep "^ " | tr -s ' ' | tr '\n' '|'; echo
stamp done
tar -czf $O/r14f.tgz -C $O --exclude r14f.tgz .
