#!/usr/bin/env bash
# round 13 call D: the dequantization before the prefill GEMMs reads each row's scale bytes once per warp
# (call C: 67% of a 256-token prefill chunk was DequantPackedKernel): gpu_check --quick and --no-matmul,
# then prefill rates (256 / 1024 / 4096 tokens) for main (specd.base) and the new build, the new one also
# with 512- and 1024-token chunks, and ncu's per-kernel durations of the new build's 256-token chunk
set -u
O=/tmp/r13d; mkdir -p $O; R=${OUT:-/tmp/r13d_out}; mkdir -p $R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
[ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
M6=/tmp/peer_models/qwen3-27b-Q4_K_S-d6-Q4_K_M
( [ -f $M6/target.gguf ] || timeout 120 $C/bin/specd make-model --preset qwen3-27b --type Q4_K_S --fill blocks --sync=false \
  --pair --draft-layers 6 --draft-type Q4_K_M --out $M6 > $O/mk.txt 2>&1 ) & mkpid=$!
stamp "gpu_check --quick, --no-matmul"
timeout 200 $C/bin/gpu_check --quick > $O/check.log 2>&1; echo "check --quick rc=$?"
grep -E "^FAIL|SUMMARY" $O/check.log | head -20
timeout 150 $C/bin/gpu_check --no-matmul > $O/check2.log 2>&1; echo "check --no-matmul rc=$?"
grep -E "^FAIL|SUMMARY" $O/check2.log | head -20
wait $mkpid
T=$M6/target.gguf
for b in specd.base specd; do
  for p in 256 1024 4096; do
    timeout 60 $C/bin/$b bench --backend cuda --model $T --ctx $((p + 64)) --prefill $p --batches 1 --verify-k 1 --reps 2 > $O/$b.pre$p.txt 2>&1
    echo "$b $(grep -h '^prefill' $O/$b.pre$p.txt)"
  done
done
for mb in 512 1024; do
  for p in 1024 4096; do
    timeout 60 $C/bin/specd bench --backend cuda --model $T --ctx $((p + 64)) --prefill $p --batches 1 --verify-k 1 --reps 2 --max-batch-tokens $mb > $O/specd.mb$mb.pre$p.txt 2>&1
    echo "specd max-batch-tokens $mb: $(grep -h '^prefill' $O/specd.mb$mb.pre$p.txt)"
  done
done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
stamp "ncu: one 256-token prefill chunk (new build)"
timeout 200 $NCU --metrics gpu__time_duration.sum --csv --print-units base --clock-control none \
  --launch-count 4000 $C/bin/specd bench --backend cuda --model $T --ctx 300 --prefill 256 --batches 1 --verify-k 1 --reps 1 \
  > $O/ncu.csv 2> $O/ncu.err; echo "ncu rc=$?"
python3 - $O/ncu.csv <<'PY' || true
import csv, sys, collections, re
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value")
body = rows[1:]
idx = [i for i, r in enumerate(body) if re.search(r"gemm|Gemm|DequantPacked|ToHalf|nvjet", r[ki])]
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
for n, (c, v) in sorted(agg.items(), key=lambda x: -x[1][1])[:16]:
    print(f"{v/1e6:9.3f} ms {c:6d}  {n}")
PY
stamp done
tar -czf $R/r13d.tgz -C $O .
