#!/usr/bin/env bash
# Round 15 call D: (1) per-kernel GPU time of the six-sequence verifies (6 x 3, 6 x 5 tokens at 1100;
# call C's run stopped at the model's 16-token batch limit); (2) ncu's full sections and per-SASS source
# counters of the small kernels of one decode step (RMSNorm, RoPE, attention, SwiGLU), which take 7-25 us
# each in isolation.
set -u
# (Run with the loops that tests/gpu/device_lib.sh now holds as ncu_step: equivalent commands.)
. tests/gpu/device_lib.sh
device_setup
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for st in "6 3" "6 5"; do ncu_step $st 1100; done
stamp "ncu --set full: small kernels of a decode step"
timeout 300 $NCU --clock-control none --profile-from-start off --set full --import-source no \
  -k 'regex:RmsNormKernel|SwiGLUQuantKernel|RopeKernel|AttnSplitV2Kernel' --launch-skip 4 --launch-count 5 \
  -o $O/small $C/bin/gpu_check --profile-step 1 1 1100 > $O/small.log 2>&1
echo "rc=$?"; tail -3 $O/small.log
$NCU -i $O/small.ncu-rep --page details > $O/small_details.txt 2>&1
grep -E "RmsNorm|SwiGLU|Rope|AttnSplit|Duration|Elapsed Cycles|Registers Per|Achieved Occ|Warp Cycles Per Issued|Issued Warp Per|Eligible Warps|No Eligible|Block Size|Grid Size" $O/small_details.txt | head -90
$NCU -i $O/small.ncu-rep --page source --print-source sass --csv > $O/small_sass.csv 2>&1
wc -l $O/small_sass.csv
xz -9 $O/small_details.txt $O/small_sass.csv
rm -f $O/small.ncu-rep
stamp done
