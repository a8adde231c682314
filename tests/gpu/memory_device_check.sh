#!/usr/bin/env bash
# One budget for one card, and weights shared between the workers, on the
# device, with the three services on generated files (one device-tool call):
#
#   seed    the seed's configuration: 27B-class Q4_K_S target (qwen3-27b) +
#           3B-class Q4_K_M draft (qwen2.5-3b), Q8_0 KV, 6 sequences x 4096,
#           both workers with --vram-budget 24GiB; a request served; nvidia-smi's
#           per-process memory and their sum <= 24 GiB; the draft's start saw
#           the target in the device registry ("other engines");
#   refuse  a draft whose budget leaves too little next to the target refuses
#           to start, saying so;
#   share   a 6-layer draft derived from the target (its embedding, head and
#           layers are the target's bytes): with --share-weights auto it maps
#           them (CUDA IPC) and its process holds less device memory than with
#           --share-weights off, by about the shared bytes (nvidia-smi, per
#           process and the device total); greedy output equals target-only and
#           sampled output is the same token for token in both runs;
#   restart the target is killed: the draft drops its mapping (the dead
#           target's memory is released: the device total falls to about the
#           draft's own) and maps the restarted target's; speculation resumes.
#
# PASS/FAIL lines, then a verdict; figures under $OUT (memory.tsv: one line per
# measurement). Binaries from .devcarry/ (tests/gpu/make_carry.sh), as in
# tests/gpu/ipc_device_check.sh.
#   tests/gpu/memory_device_check.sh [models|seed refuse share restart]   (default: all)
# The models are generated once into $MEM_MODELS (default /tmp/mem_models): the
# 27B target is ~4000 CPU-seconds of generation (~5 min on 16 cores) and 15 GB.
# Within a 10-minute call limit: "models" alone (generation and the plans),
# then "seed refuse", then "share restart", on the same (warm) machine.
set -u
OUT=${OUT:-/tmp/memory_out}
mkdir -p "$OUT"
root=$(pwd)
[ -d .devcarry ] || { [ -f .devpack/devcarry.tar.xz ] && tar -xJf .devpack/devcarry.tar.xz; }
C=${MEM_CARRY:-$root/.devcarry}
export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
S=$C/bin/specd
M=${MEM_MODELS:-/tmp/mem_models}
TP=17831; DP=17832; CP=17830; CO=127.0.0.1:$CP
BUDGET=24GiB
# A dry run of the plumbing elsewhere: MEM_BACKEND=cpu, small MEM_*_PRESET,
# SPECD_TEST_WEIGHT_SHARING=file (the device checks then fail).
BACKEND=${MEM_BACKEND:-cuda}
TPRESET=${MEM_TARGET_PRESET:-qwen3-27b}; TTYPE=${MEM_TARGET_TYPE:-Q4_K_S}
DPRESET=${MEM_DRAFT_PRESET:-qwen2.5-3b}; DTYPE=${MEM_DRAFT_TYPE:-Q4_K_M}; DLAYERS=${MEM_DRAFT_LAYERS:-6}
REG=${MEM_REGISTRY:+--device-registry $MEM_REGISTRY}  # default: auto (/dev/shm/specd-registry-UID on a GPU)
W="--backend $BACKEND --vram-budget $BUDGET --kv-type q8_0 --max-seqs 6 --max-seq-len 4096 $REG"
stages=${*:-seed refuse share restart}
fails=0
t0=$(date +%s)
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
check() { local name=$1; shift; if "$@"; then pass "$name"; else fail "$name"; fi; }
stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }

if ! "$S" --help > /dev/null 2>&1; then
  echo "FAIL carried specd does not start:"; ldd "$S" | grep -i "not found"; echo "VERDICT FAIL"; exit 1
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1

tpid=""; dpid=""; cpid=""
stop() { for p in "$@"; do [ -n "$p" ] && kill "$p" 2> /dev/null; done; for p in "$@"; do [ -n "$p" ] && wait "$p" 2> /dev/null; done; }
cleanup() { stop "$cpid" "$dpid" "$tpid"; }
trap cleanup EXIT

mib_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1 | tr -d ' '; }
mib_of() {  # mib_of PID: nvidia-smi's per-process figure (0 when not listed)
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits |
    awk -F', *' -v p="$1" '$1 == p { print $2; f = 1 } END { if (!f) print 0 }'
}
# record TAG: the per-process figures of target and draft, their sum and the device's total.
record() {
  local t d
  t=$(mib_of "${tpid:-0}"); d=$(mib_of "${dpid:-0}")
  printf '%s\ttarget_mib=%s\tdraft_mib=%s\tsum_mib=%s\tdevice_used_mib=%s\tbaseline_mib=%s\n' "$1" "$t" "$d" \
    $((t + d)) "$(mib_used)" "$BASE" | tee -a "$OUT/memory.tsv"
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv > "$OUT/smi_$1.csv"
}
field() { grep "^$1	" "$OUT/memory.tsv" | tail -1 | tr '\t' '\n' | grep "^$2=" | cut -d= -f2; }
to_mib() {  # "1.49 GiB" / "512.00 MiB" / "300 B" -> MiB (integer)
  awk -v v="$1" -v u="$2" 'BEGIN { m = u == "GiB" ? 1024 : u == "MiB" ? 1 : u == "KiB" ? 1/1024 : 1/1048576; printf "%d", v * m }'
}

start_target() {  # start_target LOGTAG [flags]
  local tag=$1; shift
  "$C/bin/specd-target-worker" --model "$M/target.gguf" --listen 127.0.0.1:$TP $W "$@" > "$OUT/$tag.target.log" 2>&1 &
  tpid=$!
  for _ in $(seq 1 600); do
    grep -q "msg=serving" "$OUT/$tag.target.log" && return 0
    kill -0 $tpid 2> /dev/null || break
    sleep 0.5
  done
  echo "   target did not start:"; tail -n 20 "$OUT/$tag.target.log"; return 1
}
start_draft() {  # start_draft LOGTAG MODEL [flags]: waits until the coordinator uses it
  local tag=$1 model=$2; shift 2
  "$C/bin/specd-draft-worker" --model "$model" --listen 127.0.0.1:$DP $W --k-max 8 "$@" > "$OUT/$tag.draft.log" 2>&1 &
  dpid=$!
  for _ in $(seq 1 240); do
    draft_in_use && return 0
    kill -0 $dpid 2> /dev/null || break
    sleep 0.5
  done
  echo "   draft not in use:"; tail -n 20 "$OUT/$tag.draft.log"; return 1
}
# The coordinator speculates with this draft process (not one stopped before).
draft_in_use() {
  local st
  st=$("$S" stats --coordinator $CO 2> /dev/null)
  grep -q "draft ready" <<< "$st" && grep -q "^draft: .* pid $dpid;" <<< "$st"
}
start_coordinator() {
  "$C/bin/specd-coordinator" --target 127.0.0.1:$TP --draft 127.0.0.1:$DP --listen $CO --no-adaptive --k 4 \
    --min-confidence 0 --probe-interval-ms 200 > "$OUT/coord.log" 2>&1 &
  cpid=$!
}
gen() {  # gen FILE ARGS...: token ids on FILE's "ids:" line
  local f=$1; shift
  timeout 240 "$S" generate --coordinator $CO --ignore-eos --print-ids --prompt "The history of the harbour" "$@" \
    > "$f" 2> "$f.err" || { echo "   generate $* failed: $(tail -n 2 "$f.err")"; return 1; }
}
ids() { grep '^ids:' "$1"; }
speculated() { for f in "$@"; do grep -q "acceptance" "$f.err" || return 1; done; }
same_ids() { [ -n "$(ids "$1")" ] && [ "$(ids "$1")" = "$(ids "$2")" ]; }
le() { [ "$1" -le "$2" ]; }
ge() { [ "$1" -ge "$2" ]; }

stamp "generating the models in $M"
mkdir -p "$M"
# Random valid blocks (the values do not matter here): seconds, not minutes.
[ -f "$M/target.gguf" ] || timeout 480 "$S" make-model --preset "$TPRESET" --type "$TTYPE" --fill blocks --sync=false --out "$M/target.gguf" \
  > "$OUT/make_target.log" 2>&1 || { tail -n 5 "$OUT/make_target.log"; fail "make-model 27B target"; }
[ -f "$M/draft3b.gguf" ] || timeout 300 "$S" make-model --preset "$DPRESET" --type "$DTYPE" --fill blocks --sync=false --out "$M/draft3b.gguf" \
  > "$OUT/make_draft3b.log" 2>&1 || fail "make-model 3B draft"
[ -f "$M/draft6.gguf" ] || timeout 300 "$S" make-model --derive-from "$M/target.gguf" --draft-layers "$DLAYERS" --sync=false \
  --out "$M/draft6.gguf" > "$OUT/make_draft6.log" 2>&1 || fail "derive the 6-layer draft"
stamp "plans"
"$S" plan --backend "$BACKEND" --target "$M/target.gguf" --draft "$M/draft3b.gguf" --vram-budget $BUDGET --kv-type q8_0 --max-seqs 6 \
  --max-seq-len 4096 > "$OUT/plan_seed.txt" 2>&1
check "plan: the seed's pair fits 24 GiB" grep -q "FITS" "$OUT/plan_seed.txt"
"$S" plan --backend cuda --target "$M/target.gguf" --draft "$M/draft6.gguf" --vram-budget $BUDGET --kv-type q8_0 --max-seqs 6 \
  --max-seq-len 4096 > "$OUT/plan_derived.txt" 2>&1
check "plan: the derived draft maps its tensors from the target" grep -q "draft maps from the target" "$OUT/plan_derived.txt"
grep -E "^(target|draft|together)|total|maps" "$OUT/plan_seed.txt" "$OUT/plan_derived.txt" | sed 's/^/   /'

if [ "$stages" = models ]; then
  stamp "models ready"
  if [ $fails = 0 ]; then echo "VERDICT PASS"; else echo "VERDICT FAIL ($fails failed)"; exit 1; fi
  exit 0
fi

BASE=$(mib_used)
echo "   device memory used before: $BASE MiB"
stamp "target up (exports its weights)"
start_target t1 || { echo "VERDICT FAIL"; exit 1; }
check "target exports its weights (CUDA IPC)" grep -q "weight sharing: exporting" "$OUT/t1.target.log"
grep -E "exporting|device memory by the driver" "$OUT/t1.target.log" | cut -c1-300 | sed 's/^/   /'
start_coordinator

if [[ " $stages " == *" seed "* ]]; then
  stamp "seed: 27B Q4_K_S target + 3B Q4_K_M draft, one 24 GiB budget"
  if start_draft seed "$M/draft3b.gguf"; then
    gen "$OUT/seed_g.txt" --max-tokens 64 && pass "seed: a request served with both workers up"
    record seed
    check "seed: nvidia-smi target + draft <= 24 GiB" le "$(field seed sum_mib)" 24576
    check "seed: the device's memory growth <= 24 GiB" le $(( $(field seed device_used_mib) - BASE )) 24576
    check "seed: the draft planned against the target's share (other engines)" grep -q "other engines" "$OUT/seed.draft.log"
    "$S" stats --coordinator $CO > "$OUT/seed_stats.txt" 2>&1
    grep -E "memory:|weights:" "$OUT/seed_stats.txt" | sed 's/^/   /'
    # The plan against the driver's figure (the runtime line is an estimate).
    grep -h "device memory by the driver" "$OUT/t1.target.log" "$OUT/seed.draft.log" | cut -c1-260 | sed 's/^/   /'
  else
    fail "seed: the 3B draft did not start next to the target"
  fi
  stop "$dpid"; dpid=""
fi

if [[ " $stages " == *" refuse "* ]]; then
  stamp "refuse: a draft budget too small for the pair"
  tmib=$(mib_of "$tpid")
  # shellcheck disable=SC2086
  timeout 120 "$C/bin/specd-draft-worker" --model "$M/draft3b.gguf" --listen 127.0.0.1:$DP --backend "$BACKEND" \
    --kv-type q8_0 --max-seqs 6 --max-seq-len 4096 $REG --vram-budget $(( tmib + 512 ))MiB > "$OUT/refuse.draft.log" 2>&1
  rc=$?
  check "refuse: the draft exits with an error (rc $rc)" test $rc -eq 1
  check "refuse: it says the pair does not fit one budget" grep -q "one budget for the device" "$OUT/refuse.draft.log"
  grep -A3 "refusing" "$OUT/refuse.draft.log" | head -4 | sed 's/^/   /'
fi

if [[ " $stages " == *" share "* ]]; then
  stamp "share: a 6-layer derived draft, own copy then mapped"
  if start_draft own "$M/draft6.gguf" --share-weights off; then
    gen "$OUT/own_s.txt" --max-tokens 96 --temperature 0.8 --top-p 0.9 --seed 7 || fail "share: sampled (own copy)"
    gen "$OUT/own_g.txt" --max-tokens 96 || fail "share: greedy (own copy)"
    record own
  else
    fail "share: the derived draft (own copy) did not start"
  fi
  stop "$dpid"; dpid=""; sleep 1
  if start_draft shared "$M/draft6.gguf" --share-weights auto; then
    gen "$OUT/shared_s.txt" --max-tokens 96 --temperature 0.8 --top-p 0.9 --seed 7 || fail "share: sampled (mapped)"
    gen "$OUT/shared_g.txt" --max-tokens 96 || fail "share: greedy (mapped)"
    gen "$OUT/ref_g.txt" --max-tokens 96 --no-speculation || fail "share: target-only"
    record shared
    "$S" stats --coordinator $CO > "$OUT/shared_stats.txt" 2>&1
    grep -E "memory:|weights:" "$OUT/shared_stats.txt" | sed 's/^/   /'
    check "share: the draft maps the target's tensors" grep -q "weight sharing: mapping" "$OUT/shared.draft.log"
    check "share: through CUDA IPC" grep -q "CUDA IPC mapping of pid" "$OUT/shared.draft.log"
    sh=$(grep -oE '\(\+ [0-9.]+ [KMG]?i?B shared' "$OUT/shared_stats.txt" | head -1 | awk '{ print $2, $3 }')
    sh_mib=$(to_mib ${sh:-0 B})
    own_d=$(field own draft_mib); sh_d=$(field shared draft_mib)
    own_dev=$(field own device_used_mib); sh_dev=$(field shared device_used_mib)
    echo "   shared ${sh:-?} ($sh_mib MiB); draft process: own copy $own_d MiB, mapped $sh_d MiB;" \
         "device used: $own_dev -> $sh_dev MiB"
    check "share: the draft process holds less by about the shared bytes (nvidia-smi per process)" \
      ge $(( own_d - sh_d )) $(( sh_mib * 9 / 10 ))
    check "share: the device total falls by about the shared bytes" ge $(( own_dev - sh_dev )) $(( sh_mib * 9 / 10 ))
    check "share: greedy output equals target-only" same_ids "$OUT/shared_g.txt" "$OUT/ref_g.txt"
    check "share: greedy output equals the own-copy run" same_ids "$OUT/shared_g.txt" "$OUT/own_g.txt"
    check "share: both sampled runs speculated (not target-only)" speculated "$OUT/shared_s.txt" "$OUT/own_s.txt"
    check "share: sampled output equals the own-copy run token for token" same_ids "$OUT/shared_s.txt" "$OUT/own_s.txt"
    check "share: nvidia-smi target + draft <= 24 GiB" le "$(field shared sum_mib)" 24576
  else
    fail "share: the derived draft (mapped) did not start"
  fi
fi

if [[ " $stages " == *" restart "* ]]; then
  stamp "restart: the target is killed and started again"
  [ -n "$dpid" ] || start_draft shared2 "$M/draft6.gguf" --share-weights auto || fail "restart: draft"
  dlog=$(ls -t "$OUT"/shared*.draft.log | head -1)
  kill -9 "$tpid"; wait "$tpid" 2> /dev/null; old_tpid=$tpid; tpid=""
  for _ in $(seq 1 100); do grep -q "draft model unloaded" "$dlog" && break; sleep 0.1; done
  check "restart: the draft dropped its mapping when the target died" grep -q "draft model unloaded" "$dlog"
  sleep 1
  record dead
  echo "   device used with the target dead: $(field dead device_used_mib) MiB (draft process $(field dead draft_mib) MiB)"
  check "restart: the dead target's memory is released (device total < baseline + 6 GiB)" \
    le $(( $(field dead device_used_mib) - BASE )) 6144
  start_target t2 || fail "restart: the target did not start again"
  for _ in $(seq 1 240); do grep -q "draft model loaded again" "$dlog" && break; sleep 0.5; done
  check "restart: the draft mapped the new target's weights" grep -q "draft model loaded again" "$dlog"
  grep -E "exited|unloaded|loaded again" "$dlog" | cut -c1-260 | sed 's/^/   /'
  for _ in $(seq 1 120); do draft_in_use && break; sleep 0.5; done
  gen "$OUT/after_g.txt" --max-tokens 96 && [ -f "$OUT/ref_g.txt" ] &&
    check "restart: greedy output after the restart equals target-only" same_ids "$OUT/after_g.txt" "$OUT/ref_g.txt"
  "$S" stats --coordinator $CO > "$OUT/after_stats.txt" 2>&1
  check "restart: the draft maps from the new target" grep -q "mapped from pid $tpid" "$OUT/after_stats.txt"
  check "restart: speculation resumed (the request's summary)" speculated "$OUT/after_g.txt"
  record restarted
  [ "$old_tpid" != "$tpid" ] || fail "restart: same target pid"
fi

stamp "done"
cat "$OUT/memory.tsv" 2> /dev/null
if [ $fails = 0 ]; then echo "VERDICT PASS"; else echo "VERDICT FAIL ($fails failed)"; exit 1; fi
