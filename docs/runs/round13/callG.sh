#!/usr/bin/env bash
# round 13 call G: ncu's per-kernel durations (mean per launch) of the draft's and the target's decode
# steps at context 64 (6-layer pair): where the draft's 1.25 ms go, for the next round
set -u
R=${OUT:-/tmp/r13g_out}; mkdir -p $R; O=$R
t0=$(date +%s); stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
[ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
C=$(pwd)/.devcarry; export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
M6=/tmp/peer_models/qwen3-27b-Q4_K_S-d6-Q4_K_M
[ -f $M6/target.gguf ] || timeout 120 $C/bin/specd make-model --preset qwen3-27b --type Q4_K_S --fill blocks --sync=false \
  --pair --draft-layers 6 --draft-type Q4_K_M --out $M6 > $O/mk.txt 2>&1
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for m in draft target; do
  stamp "ncu: $m decode at context 64"
  timeout 100 $NCU --metrics gpu__time_duration.sum --csv --print-units base --clock-control none --launch-count 1500 \
    $C/bin/specd bench --backend cuda --model $M6/$m.gguf --ctx 64 --prefill 16 --batches 1 --verify-k 1 --reps 2 \
    > $O/ncu.$m.csv 2> $O/ncu.$m.err; echo "ncu rc=$?"
  python3 - $O/ncu.$m.csv <<'PY' || true
import csv, sys, collections, re
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ki = h.index("Kernel Name"); vi = h.index("Metric Value")
agg = collections.defaultdict(lambda: [0, 0.0])
for r in rows[1:]:
    n = re.sub(r"\(.*", "", r[ki])[:64]
    if re.search(r"Pack|Fill|Synth|nvjet|gemm|splitK|ToHalf|Dequant", n): continue
    try: v = float(r[vi].replace(",", ""))
    except ValueError: continue
    agg[n][0] += 1; agg[n][1] += v
for n, (c, v) in sorted(agg.items(), key=lambda x: -x[1][1])[:18]:
    print(f"{v/1e3/c:9.2f} us/launch {c:6d} launches  {v/1e6:8.3f} ms  {n}")
PY
done
stamp done
xz -9 $O/*.csv
