#!/usr/bin/env bash
# round 9 call B (one-off): prefill anatomy (timings, ncu), llama.cpp's pp, the 0.6B-class pair
set -u
O=/tmp/r9b; mkdir -p $O; R=${OUT:-/tmp/r9b_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
OUT=$O/round RESIDUAL_GAIN=0.05 bash tests/gpu/device_round.sh pair27 > $O/round.log 2>&1
M=/tmp/peer_models/qwen3-27b-g0.05-Q4_K_S-d6-Q4_K_M; T=$M/target.gguf
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
for n in 64 128 256 512; do
  stamp "prefill $n"
  timeout 60 $C/bin/specd bench --backend cuda --model $T --ctx 1024 --prefill $n --batches 1 --verify-k 1 --reps 2 > $O/pf$n.txt 2>&1
  grep prefill: $O/pf$n.txt
done
stamp "ncu prefill 256"
ncu_bin=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 240 "$ncu_bin" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
  $C/bin/specd bench --backend cuda --model $T --ctx 512 --prefill 256 --batches 1 --verify-k 1 --reps 1 > $O/ncu_pf.csv 2> $O/ncu_pf.err
echo "ncu rc=$?"
python3 - $O/ncu_pf.csv <<'PY'
import csv, sys, re, collections
rows = list(csv.reader(open(sys.argv[1])))
hdr = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
if hdr is None: print("no ncu rows"); sys.exit(0)
h = rows[hdr]; ki, mi, vi = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value")
seq = []
for r in rows[hdr + 1:]:
    if len(r) <= vi or r[mi] != "gpu__time_duration.sum": continue
    name = re.sub(r"\(.*", "", r[ki]); name = re.sub(r"<.*", "", name).split("::")[-1]
    seq.append((name, float(r[vi].replace(",", ""))))
print("kernels", len(seq))
# The prefill forward: from the first ToHalf/GEMM-ish kernel after the load's packing.
tot = collections.defaultdict(float); cnt = collections.Counter()
for n, v in seq: tot[n] += v; cnt[n] += 1
for k, v in sorted(tot.items(), key=lambda x: -x[1])[:30]:
    print(f"{k[:60]:60s} {cnt[k]:6d} {v/1e3:10.1f} us total {v/cnt[k]/1e3:8.1f} us each")
PY
L=/tmp/peer/llama-cuda/bin
mkdir -p /tmp/peer && tar -C /tmp/peer -xJf .peer/llama-cuda.tar.xz
nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
stamp "llama-bench pp"
LD_LIBRARY_PATH="/tmp/peer/llama-cuda/lib:/usr/local/cuda/lib64:${nccl:+$nccl:}" timeout 90 $L/llama-bench -m $T -ngl 99 -fa 1 -p 64,128,256,512 -n 0 -r 2 -o md > $O/llama_pp.txt 2>&1
cat $O/llama_pp.txt | tail -8
stamp "0.6B-class pair"
OUT=$O/p06 DRAFT_PRESET=qwen3-0.6b SUCCESSOR_GAIN=19 SPEC_ONLY=1 SPEC_NS="3 6" PEER_BUDGET_S=280 bash tests/gpu/peer_bench.sh 2>&1 | tail -n 30
stamp done
tar -czf $R/r9b.tgz -C $O .
