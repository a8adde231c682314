#!/usr/bin/env bash
# Round 16 call A: (1) the attention: Q8_0 rows staged raw by cp.async and converted with half2
# arithmetic (same F16 bits), the rows no kernel of the step writes requested (and Q8_0 converted)
# before griddepcontrol.wait, Q fragments with their row found once; (2) RoPE: the head in registers,
# angles computed before the wait, partners through shared memory, the KV row stored from registers;
# (3) RMSNorm past 64 rows: a block per row (round 15's next-norm-prefill.patch).
# specd.base = round 15's final kernels (call H/I build). gpu_check --no-matmul, ncu per-kernel times
# (decode at 1100, KV q8_0 and f16; f16 at 64), ncu source counters of the f16 attention, specd bench
# against specd.base twice alternating (KV f16, bench's default), Q8_0 KV decode/verify at 4200, prefill.
set -u
. tests/gpu/device_lib.sh
device_setup
make_pair $M6 & mkpid=$!
stamp "gpu_check --no-matmul"
timeout 150 $C/bin/gpu_check --no-matmul > $O/check_nomatmul.log 2>&1; echo "rc=$?"
grep -E "^FAIL|SUMMARY" $O/check_nomatmul.log | head -20
xz -9 $O/check_nomatmul.log
ncu_step 1 1 1100
ncu_step 1 1 1100 f16
ncu_step 1 1 64 f16
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
stamp "ncu --set full: attention and RoPE of a decode step at 1100, KV f16"
timeout 120 $NCU --clock-control none --profile-from-start off --set full --import-source no \
  -k 'regex:AttnSplitV2Kernel|RopeKernel' --launch-skip 4 --launch-count 4 \
  -o $O/attn $C/bin/gpu_check --profile-step 1 1 1100 f16 > $O/attn.log 2>&1
echo "rc=$?"
$NCU -i $O/attn.ncu-rep --page details > $O/attn_details.txt 2>&1
grep -E "AttnSplit|RopeKernel|Duration|Registers Per|Warp Cycles Per Issued|Executed Instructions  " $O/attn_details.txt | head -24
$NCU -i $O/attn.ncu-rep --page source --print-source sass --csv > $O/attn_sass.csv 2>&1
xz -9 $O/attn_details.txt $O/attn_sass.csv
rm -f $O/attn.ncu-rep
wait $mkpid
bench_against 2 specd.base specd
for b in specd.base specd specd.base specd; do
  stamp "$b: KV q8_0 at 4200 (decode, verify 4); prefill 512 and 128"
  timeout 60 $C/bin/$b bench --backend cuda --model $M6/target.gguf --kv-type q8_0 --ctx 4200 --prefill 4096 \
    --batches 1 --verify-k 1,4 --reps 5 2>&1 | grep -E "^prefill|^ +[0-9]" | tr -s ' ' | tr '\n' '|'; echo
  timeout 60 $C/bin/$b bench --backend cuda --model $M6/target.gguf --ctx 1100 --prefill 512 --batches 1 \
    --verify-k 1 --reps 2 2>&1 | grep -E "^prefill" | tr '\n' '|'
  timeout 60 $C/bin/$b bench --backend cuda --model $M6/target.gguf --ctx 600 --prefill 128 --batches 1 \
    --verify-k 1 --reps 2 2>&1 | grep -E "^prefill" | tr '\n' '|'; echo
done
stamp done
