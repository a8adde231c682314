# Shared preamble of the device-call scripts (docs/runs/round*/call*.sh), sourced:
#   . tests/gpu/device_lib.sh
#   device_setup               O=$OUT (or /tmp/device_out), stamp(), the carried
#                              .devcarry unpacked (from $DEVPACK, afresh; default
#                              .devpack/devcarry.tar.xz if none is there), C=.devcarry, LD_LIBRARY_PATH;
#                              prints the card
#   make_pair DIR [ARGS...]    the 27B-class Q4_K_S target + 6-layer Q4_K_M derived
#                              draft (random valid blocks) into DIR unless there,
#                              extra make-model ARGS (e.g. --residual-gain 0.05); its seconds
#                              in DIR/make-model.seconds
#   M6, M8                     the 6-layer pair's and the ~80% pair's folders
#   peer_run DIR BUDGET [VAR=V...]  tests/gpu/peer_bench.sh with the pack's specd (VARs: its settings, e.g.
#                              SPEC_NS="3 6"), within BUDGET s, into $O/DIR; its rc and table
#   peer_libs                  llama.cpp from .peer/llama-cuda.tar.xz unpacked into /tmp/peer (peer_bench.sh
#                              finds it there) and its lib on LD_LIBRARY_PATH: a pack that leaves out
#                              libssl / libcrypto / libstdc++ (to fit the carry limit beside .peer) takes them there
#   bench_against REPS BIN...  specd bench of the 6-layer pair ($M6, made first) with each binary of
#                              .devcarry/bin in turn, REPS times: the target at context 64 (batch 1, 8;
#                              verify 1, 4; CTX64_VERIFY overrides) and 4200 (verify 1, 4, 7; DEPTH_VERIFY), the
#                              draft at 64; a line each, the outputs into $O/bench.log.xz
#   ncu_step SEQS TOKENS CTX [KV]  ncu's per-kernel GPU time of one 27B-class forward (gpu_check
#                              --profile-step; KV q8_0, or f16 as specd bench), summed per kernel; the
#                              CSV into $O/ncu_sSEQStTOKENS[KV][.V].csv.xz (GPU_CHECK=gpu_check.V: that build)
#   gpu_checks FLAG...         gpu_check with each flag in turn (--no-matmul, --spec, ...): rc, the checks
#                              passed and the SUMMARY/FAIL lines, the log into $O/check_FLAG.log.xz;
#                              GPU_CHECK=gpu_check.V runs that build instead (log $O/check_V_FLAG.log.xz);
#                              CHECK_TIMEOUT s each (150); CHECK_TYPES=Q4_K,Q6_K,... adds --types
#   bench_verify6 REPS BIN...  with each binary in turn, REPS times: batch 6 and 8 decode and six sequences'
#                              verify 2 / 4 (18 / 30 columns, the wide matvec) at 1024 ($M6's target)
#   ncu_full TAG REGEX SKIP COUNT ARGS...  ncu --set full of the kernels matching REGEX (after SKIP
#                              launches, COUNT of them) in `gpu_check --profile-step ARGS`: the headline
#                              metrics, the warp stall samples by SASS region (ncu_sass_regions.py),
#                              $O/TAG_details.txt.xz and the SASS source counters $O/TAG_sass.csv.xz
#                              (GPU_CHECK=gpu_check.V: that build)
#   ncu_full_of TAG REGEX SKIP COUNT BINARY ARGS...  the same of any command (profiled from its start;
#                              NCU_FROM_START=off: from its cudaProfilerStart; NCU_NAME_BASE=demangled: REGEX
#                              against the demangled name with template arguments, to pick one instantiation)
#   bench_q8_prefill BIN...    with each binary: KV Q8_0 decode / verify 4 at 4200, prefill of 512 and 128
#                              tokens (a line each)
#   prefill_qg BIN TOKENS QG   one `specd bench --prefill TOKENS --cuda-qgemm-max-tokens QG` line of BIN on
#                              $M6's target (QG 0: the slab and cuBLAS), tagged with BIN and QG
#   bench_multi REPS BIN...    with each binary in turn, REPS times: batch 6 and 8 decode and six sequences'
#                              verify 4 at 1024, verify 6 at 4200 ($M6's target; a line each)
#   bench_row BIN ARGS...      one line of `specd bench` rows (BIN of .devcarry/bin on $M6's target, --reps 5,
#                              BENCH_TIMEOUT s: 60)
#   table_tps LABEL FILE       the tok/s of row LABEL in the table tests/gpu/batch_spec.sh printed to FILE
#   six_streams TAG K [FLAGS]  tests/gpu/batch_spec.sh on the ~80% pair ($M8, made first), 256 tokens, fresh
#                              services: K 0 target-only, N fixed k = N, "auto" adaptive; FLAGS reach both
#                              workers; its table row, the verify check and the step anatomy; logs in $O/six/TAG
#   graph_shapes LOG           the CUDA graph captures and eager first runs in a worker's debug log (run with
#                              --log-level debug), counted by batch shape (tokens, outputs, sequences, why)
#   before SECONDS WHAT        true while the call is younger than SECONDS, else says WHAT is skipped (stages
#                              of a call that may be cut short: `before 300 ncu && ncu_step ...`)
#   bundle_out                 everything under $O into one $O/out.tar.xz (the device tool returns at most
#                              8 files): a call script's last step
#   work_under DIR / snap      the call's output goes to DIR, and each snap archives it into $OUT/out.tar.xz
#                              (instead of bundle_out: a call cut short still returns what ran)
M6=/tmp/peer_models/qwen3-27b-Q4_K_S-d6-Q4_K_M
M8=/tmp/peer_models/qwen3-27b-g0.05-Q4_K_S-d6-Q4_K_M
device_setup() {
  O=${OUT:-/tmp/device_out}
  mkdir -p "$O"
  t0=$(date +%s)
  # A warm machine keeps the previous call's unpacked binaries: a named pack is always unpacked afresh.
  [ -n "${DEVPACK:-}" ] && rm -rf .devcarry
  [ -d .devcarry ] || tar -xJf "${DEVPACK:-.devpack/devcarry.tar.xz}"
  C=$(pwd)/.devcarry
  export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader 2> /dev/null || true  # the card
}
stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
peer_run() {
  local dir=$1 budget=$2
  shift 2
  env "$@" SPECD_BIN="$C/bin/specd" PEER_BUDGET_S="$budget" OUT="$O/$dir" timeout $(( budget + 20 )) \
    bash tests/gpu/peer_bench.sh > /dev/null 2>&1
  echo "rc=$?"
  cat "$O/$dir/table.md" 2> /dev/null
}
peer_libs() {
  mkdir -p /tmp/peer
  [ -x /tmp/peer/llama-cuda/bin/llama-bench ] || tar -C /tmp/peer -xJf .peer/llama-cuda.tar.xz
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:/tmp/peer/llama-cuda/lib
}
bench_row() {
  local b=$1
  shift
  timeout "${BENCH_TIMEOUT:-60}" "$C/bin/$b" bench --backend cuda --model "$M6/target.gguf" "$@" --reps 5 2>&1 |
    grep -E "^ +[0-9]" | tr -s ' ' | tr '\n' '|'
  echo
}
table_tps() { sed -n "s/^| $1 | \([0-9.]*\) |\$/\1/p" "$2" | tail -1; }
variant() { local v=${1#gpu_check}; echo "${v#.}"; }  # gpu_check.V -> V (gpu_check -> empty)
before() { [ $(( $(date +%s) - t0 )) -lt "$1" ] || { stamp "skipped (past $1 s): ${*:2}"; return 1; }; }
bundle_out() {
  local t
  t=$(mktemp /tmp/out.XXXXXX.tar.xz)
  tar -C "$O" -cJf "$t" . && find "$O" -mindepth 1 -delete && mv "$t" "$O/out.tar.xz"
  stamp "bundled into out.tar.xz ($(du -h "$O/out.tar.xz" | cut -f1))"
}
work_under() {
  R=$O O=$1
  mkdir -p "$O"
}
snap() {
  tar -C "$O" -cJf "$R/out.tmp" . 2> /dev/null
  mv "$R/out.tmp" "$R/out.tar.xz"
}
make_pair() {
  local d=$1
  shift
  [ -f "$d/target.gguf" ] && [ -f "$d/draft.gguf" ] && return 0
  local s rc
  s=$(date +%s)
  timeout 120 "$C/bin/specd" make-model --preset qwen3-27b --type Q4_K_S --fill blocks --sync=false --pair \
    --draft-layers 6 --draft-type Q4_K_M "$@" --out "$d" > "$O/mk.$(basename "$d").txt" 2>&1
  rc=$?
  s=$(( $(date +%s) - s ))
  # Beside the pair, for peer_bench's table (it finds the pair made and would print n/a).
  [ $rc = 0 ] && echo "$s" > "$d/make-model.seconds"
  echo "make-model: rc=$rc, $s s" >> "$O/mk.$(basename "$d").txt"
  return $rc
}
bench_against() {
  local reps=$1 rep b
  shift
  for rep in $(seq "$reps"); do
    for b in "$@"; do
      stamp "$b (rep $rep): target ctx 64 (batch 1, 8; verify ${CTX64_VERIFY:-1,4}), ctx 4200 (verify ${DEPTH_VERIFY:-1,4,7}); draft ctx 64"
      timeout 40 "$C/bin/$b" bench --backend cuda --model "$M6/target.gguf" --ctx 64 --prefill 16 --batches 1,8 \
        --verify-k "${CTX64_VERIFY:-1,4}" --reps 5 > "$O/$b.ctx64.$rep.txt" 2>&1
      sed -n '/^decode/,$p' "$O/$b.ctx64.$rep.txt" | grep "^ " | tr -s ' ' | tr '\n' '|'; echo
      timeout 60 "$C/bin/$b" bench --backend cuda --model "$M6/target.gguf" --ctx 4200 --prefill 4096 --batches 1 \
        --verify-k "${DEPTH_VERIFY:-1,4,7}" --reps 5 > "$O/$b.depth.$rep.txt" 2>&1
      sed -n '/^decode/,$p' "$O/$b.depth.$rep.txt" | grep "^ " | tr -s ' ' | tr '\n' '|'; echo
      timeout 30 "$C/bin/$b" bench --backend cuda --model "$M6/draft.gguf" --ctx 64 --prefill 64 --batches 1 \
        --verify-k 1 --reps 5 > "$O/$b.draft.$rep.txt" 2>&1
      sed -n '/^decode/,/^$/p' "$O/$b.draft.$rep.txt" | grep "^ " | tr -s ' ' | tr '\n' '|'; echo
    done
  done
  cat "$O"/*.ctx64.*.txt "$O"/*.depth.*.txt "$O"/*.draft.*.txt > "$O/bench.log"
  xz -9 "$O/bench.log"
  rm -f "$O"/*.ctx64.*.txt "$O"/*.depth.*.txt "$O"/*.draft.*.txt
}
ncu_step() {
  local b=${GPU_CHECK:-gpu_check} v tag ncu
  v=$(variant "$b")
  tag=s$1t$2${4:-}${v:+.$v}
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)
  stamp "ncu ($b): $1 sequences x $2 tokens at $3 (KV ${4:-q8_0})"
  timeout 200 "$ncu" --clock-control none --cache-control none --profile-from-start off \
    --metrics gpu__time_duration.sum --csv --print-units base "$C/bin/$b" --profile-step "$1" "$2" "$3" "${4:-q8_0}" \
    > "$O/ncu_$tag.csv" 2> "$O/ncu_$tag.err"
  echo "rc=$?"
  python3 tests/gpu/ncu_kernels.py "$O/ncu_$tag.csv" --top 14
  xz -9 "$O/ncu_$tag.csv"
}
gpu_checks() {
  local f b=${GPU_CHECK:-gpu_check} v log
  v=$(variant "$b")
  for f in "$@"; do
    stamp "$b $f${CHECK_TYPES:+ --types $CHECK_TYPES}"
    log="$O/check_${v:+${v}_}${f#--}.log"
    timeout "${CHECK_TIMEOUT:-150}" "$C/bin/$b" "$f" ${CHECK_TYPES:+--types "$CHECK_TYPES"} > "$log" 2>&1
    echo "rc=$? ($(grep -c '^PASS' "$log") passed)"
    grep -E "^FAIL|SUMMARY" "$log" | head -20
    xz -9 "$log"
  done
}
ncu_full() {
  local tag=$1 re=$2 skip=$3 count=$4
  shift 4
  NCU_FROM_START=off ncu_full_of "$tag" "$re" "$skip" "$count" "$C/bin/${GPU_CHECK:-gpu_check}" --profile-step "$@"
}
ncu_full_of() {
  local tag=$1 re=$2 skip=$3 count=$4 ncu
  shift 4
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2> /dev/null | head -1)
  stamp "ncu --set full: $re, ${*#"$C/bin/"}"
  timeout 120 "$ncu" --clock-control none --profile-from-start "${NCU_FROM_START:-on}" --set full --import-source no \
    --kernel-name-base "${NCU_NAME_BASE:-function}" -k "regex:$re" --launch-skip "$skip" --launch-count "$count" \
    -o "$O/$tag" "$@" > "$O/$tag.log" 2>&1
  echo "rc=$?"
  "$ncu" -i "$O/$tag.ncu-rep" --page details > "$O/${tag}_details.txt" 2>&1
  grep -E "Kernel|Duration|Registers Per|Warp Cycles Per Issued|Executed Instructions  |SM Active Cycles" \
    "$O/${tag}_details.txt" | head -24
  "$ncu" -i "$O/$tag.ncu-rep" --page source --print-source sass --csv > "$O/${tag}_sass.csv" 2>&1
  python3 tests/gpu/ncu_sass_regions.py "$O/${tag}_sass.csv" --step 300 --top 6
  xz -9 "$O/${tag}_details.txt" "$O/${tag}_sass.csv"
  rm -f "$O/$tag.ncu-rep"
}
prefill_qg() {
  timeout 60 "$C/bin/$1" bench --backend cuda --model "$M6/target.gguf" --ctx $(( $2 + 64 )) --prefill "$2" \
    --batches 1 --verify-k 1 --reps 2 --cuda-qgemm-max-tokens "$3" 2>&1 | grep -E "^prefill" | tr '\n' ' '
  echo "[$1 qgemm $3]"
}
bench_q8_prefill() {
  local b
  for b in "$@"; do
    stamp "$b: KV q8_0 at 4200 (decode, verify 4); prefill 512 and 128"
    timeout 60 "$C/bin/$b" bench --backend cuda --model "$M6/target.gguf" --kv-type q8_0 --ctx 4200 --prefill 4096 \
      --batches 1 --verify-k 1,4 --reps 5 2>&1 | grep -E "^prefill|^ +[0-9]" | tr -s ' ' | tr '\n' '|'
    echo
    timeout 60 "$C/bin/$b" bench --backend cuda --model "$M6/target.gguf" --ctx 1100 --prefill 512 --batches 1 \
      --verify-k 1 --reps 2 2>&1 | grep -E "^prefill" | tr '\n' '|'
    timeout 60 "$C/bin/$b" bench --backend cuda --model "$M6/target.gguf" --ctx 600 --prefill 128 --batches 1 \
      --verify-k 1 --reps 2 2>&1 | grep -E "^prefill" | tr '\n' '|'
    echo
  done
}
# Issue 11's side-by-side table with this pack's specd and llama.cpp (.peer/llama-cuda.tar.xz, carried
# beside the pack) into $O/peer; $1 says which tree or card, for the log.
peer_table() {
  stamp "peer_bench ($1)"
  SPECD_BIN=$C/bin/specd SPEC_NS=3 PEER_BUDGET_S=150 OUT=$O/peer timeout 160 bash tests/gpu/peer_bench.sh > /dev/null 2>&1
  echo "rc=$?"
  cat "$O/peer/table.md" 2> /dev/null
}
bench_verify6() {
  local reps=$1 rep b
  shift
  for rep in $(seq "$reps"); do
    for b in "$@"; do
      stamp "$b (rep $rep): batch 6, 8 decode and six sequences' verify 2 / 4 (18 / 30 columns) at 1024"
      BENCH_TIMEOUT=40 bench_row "$b" --ctx 1024 --prefill 64 --batches 6,8 --verify-k 2,4 --verify-seqs 6
    done
  done
}
bench_multi() {
  local reps=$1 rep b
  shift
  for rep in $(seq "$reps"); do
    for b in "$@"; do
      stamp "$b (rep $rep): batch 6, 8 decode and six sequences' verify 4 at 1024; verify 6 at 4200"
      BENCH_TIMEOUT=40 bench_row "$b" --ctx 1024 --prefill 64 --batches 6,8 --verify-k 4 --verify-seqs 6
      BENCH_TIMEOUT=40 bench_row "$b" --ctx 4200 --prefill 4096 --batches 1 --verify-k 6
    done
  done
}
six_streams() {
  local tag=$1 k=$2 flags=${3:-} dflags=${4:-} runs=on spec
  case $k in
    0) runs=off spec="" ;;
    auto) spec="" ;;
    *) spec="--k $k --no-adaptive" ;;
  esac
  make_pair "$M8" --residual-gain 0.05
  stamp "six streams $tag: k = $k, workers ${flags:-(defaults)}${dflags:+, draft $dflags}"
  SVC_TARGET_FLAGS="$flags" SVC_DRAFT_FLAGS="$flags $dflags" OUT=$O/six/$tag RUNS=$runs TARGET=$M8/target.gguf \
    DRAFT=$M8/draft.gguf TOKENS=256 SPEC_FLAGS="$spec" timeout 120 bash tests/gpu/batch_spec.sh > "$O/six_$tag.txt" 2>&1
  echo "rc=$?"
  grep -hE "^\| (target-only|speculative)|^verify-greedy:|^  (speculative|target-only) steps|^k histogram" \
    "$O/six_$tag.txt" "$O/six/$tag/$runs.stats.txt" 2> /dev/null | cut -c1-300
}
graph_shapes() {
  echo "$(grep -c 'cuda graph: first run, eager' "$1") eager first runs, $(grep -c 'cuda graph capture' "$1") captures in $1"
  grep -E 'msg="cuda graph(: first run, eager| capture)"' "$1" |
    sed -E 's/.*msg="cuda graph(: first run, eager| capture)".* shape="?([0-9]+),([0-9]+),([0-9]+),.*/\1: tokens=\2 out=\3 seqs=\4/;
            s/^: first run, eager/eager/; s/^ capture/capture/' | sort | uniq -c | sort -rn | head -40
  grep -E 'cuda graph capture' "$1" | grep -oE 'why="[^"]*"' | sed -E 's/op [0-9]+/op N/' | sort | uniq -c | sort -rn |
    head -12
}
