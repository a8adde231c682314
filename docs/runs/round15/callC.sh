#!/usr/bin/env bash
# Round 15 call C: where a six-sequence verify's time goes. ncu (graphs off, per-kernel GPU time) over one
# 27B-class forward each (gpu_check --profile-step SEQS TOKENS CTX): 1 x 1 and 6 x 1 (decode), 6 x 3 and
# 6 x 5 (the verify of k = 2 and k = 4 for six sequences), context 1100.
set -u
. tests/gpu/device_lib.sh
device_setup
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for st in "1 1" "6 1" "6 3" "6 5"; do
  set -- $st
  tag=s$1t$2
  stamp "ncu: $1 sequences x $2 tokens at 1100"
  timeout 200 $NCU --clock-control none --cache-control none --profile-from-start off --metrics gpu__time_duration.sum \
    --csv --print-units base $C/bin/gpu_check --profile-step $1 $2 1100 > $O/ncu_$tag.csv 2> $O/ncu_$tag.err
  echo "rc=$?"
  python3 tests/gpu/ncu_kernels.py $O/ncu_$tag.csv --top 14
done
xz -9 $O/ncu_*.csv
tar -cf $O/ncu.tar -C $O $(cd $O && ls ncu_*.csv.xz) && rm -f $O/ncu_*.csv.xz
stamp done
