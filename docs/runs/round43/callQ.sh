#!/usr/bin/env bash
# Round 43's prepared side-by-side call for the draft shape issue 11 names beside the derived one: a Qwen2.5-3B-shape
# draft (make-model --draft-preset qwen2.5-3b, an independent draft of that shape, Q4_K_M) next to the 27B-class
# Q4_K_S target, llama.cpp 0.3.36 and this tree's specd on the same files: every row of the harness (its draft
# tg128 row is the 3B draft's decode against llama-bench's: issue 11's ">= 1.5x" for that shape, never measured
# side by side), speculation at N = k = 3 and 4. SUCCESSOR_GAIN 15: a few disagreements in five (calibrate with
# the acceptance the harness prints).
#   pack: .devpackP43 (this round's specd, gpu_check; libssl / libcrypto / libstdc++ left out: peer_libs has them)
#   run(command="DEVPACK=.devpackP43/devcarry.tar.xz bash docs/runs/round43/callQ.sh", carry=[".devpackP43", ".peer"])
#   (~6 min)
set -u
export DEVPACK=${DEVPACK:-.devpackP43/devcarry.tar.xz}
. tests/gpu/device_lib.sh
device_setup
peer_libs
exec > >(tee "$O/stdout.txt") 2>&1
stamp "peer_bench, 27B-class target + Qwen2.5-3B-shape draft"
peer_run d3b 420 DRAFT_PRESET=qwen2.5-3b SUCCESSOR_GAIN=15 SPEC_NS="3 4"
stamp done
bundle_out
