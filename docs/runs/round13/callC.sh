#!/usr/bin/env bash
# round 13 call C: where a prefill's time goes. Prefill rates at short and long context (256 / 1024 /
# 4096 tokens), then ncu's per-kernel durations of one 256-token prefill chunk at context 0
set -u
O=/tmp/r13c; mkdir -p $O; R=${OUT:-/tmp/r13c_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
[ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
M6=/tmp/peer_models/qwen3-27b-Q4_K_S-d6-Q4_K_M
[ -f $M6/target.gguf ] || timeout 120 $C/bin/specd make-model --preset qwen3-27b --type Q4_K_S --fill blocks --sync=false \
  --pair --draft-layers 6 --draft-type Q4_K_M --out $M6 > $O/mk.txt 2>&1
T=$M6/target.gguf
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1); echo "ncu: $NCU"
for p in 256 1024 4096; do
  stamp "prefill $p"
  timeout 60 $C/bin/specd bench --backend cuda --model $T --ctx $((p + 64)) --prefill $p --batches 1 --verify-k 1 --reps 2 > $O/pre$p.txt 2>&1
  grep -h "^prefill" $O/pre$p.txt
done
stamp "ncu: one 256-token prefill chunk"
timeout 300 $NCU --metrics gpu__time_duration.sum --csv --print-units base --clock-control none \
  --launch-count 4000 $C/bin/specd bench --backend cuda --model $T --ctx 300 --prefill 256 --batches 1 --verify-k 1 --reps 1 \
  > $O/ncu.csv 2> $O/ncu.err; echo "ncu rc=$?"; tail -3 $O/ncu.err; wc -l $O/ncu.csv
python3 - $O/ncu.csv <<'PY' || true
import csv, sys, collections, re
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value")
body = rows[1:]
idx = [i for i, r in enumerate(body) if re.search(r"gemm|Gemm|DequantPacked|ToHalf|sm90_xmma|cutlass", r[ki])]
lo, hi = (max(0, idx[0] - 40), min(len(body), idx[-1] + 40)) if idx else (0, len(body))
print(f"prefill window: rows {lo}..{hi} of {len(body)}")
agg = collections.defaultdict(lambda: [0, 0.0])
for r in body[lo:hi]:
    n = re.sub(r"\(.*", "", r[ki])[:70]
    try: v = float(r[vi].replace(",", ""))
    except ValueError: continue
    agg[n][0] += 1; agg[n][1] += v
tot = sum(v for _, v in agg.values())
print(f"total {tot/1e6:.2f} ms over {sum(c for c, _ in agg.values())} kernels")
for n, (c, v) in sorted(agg.items(), key=lambda x: -x[1][1])[:25]:
    print(f"{v/1e6:9.3f} ms {c:6d}  {n}")
PY
stamp done
tar -czf $R/r13c.tgz -C $O .
