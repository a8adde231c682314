#!/usr/bin/env bash
# Round 15 call C: where a six-sequence verify's time goes. ncu (graphs off, per-kernel GPU time) over one
# 27B-class forward each (gpu_check --profile-step SEQS TOKENS CTX): 1 x 1 and 6 x 1 (decode), 6 x 3 and
# 6 x 5 (the verify of k = 2 and k = 4 for six sequences), context 1100.
set -u
# (Run with the loops that tests/gpu/device_lib.sh now holds as ncu_step: equivalent commands.)
. tests/gpu/device_lib.sh
device_setup
for st in "1 1" "6 1" "6 3" "6 5"; do ncu_step $st 1100; done
stamp done
