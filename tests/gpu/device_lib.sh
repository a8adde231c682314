# Shared preamble of the device-call scripts (docs/runs/round*/call*.sh), sourced:
#   . tests/gpu/device_lib.sh
#   device_setup               O=$OUT (or /tmp/device_out), stamp(), the carried
#                              .devcarry unpacked, C=.devcarry, LD_LIBRARY_PATH
#   make_pair DIR [ARGS...]    the 27B-class Q4_K_S target + 6-layer Q4_K_M derived
#                              draft (random valid blocks) into DIR unless there,
#                              extra make-model ARGS (e.g. --residual-gain 0.05)
#   M6, M8                     the 6-layer pair's and the ~80% pair's folders
M6=/tmp/peer_models/qwen3-27b-Q4_K_S-d6-Q4_K_M
M8=/tmp/peer_models/qwen3-27b-g0.05-Q4_K_S-d6-Q4_K_M
device_setup() {
  O=${OUT:-/tmp/device_out}
  mkdir -p "$O"
  t0=$(date +%s)
  [ -d .devcarry ] || tar -xJf .devpack/devcarry.tar.xz
  C=$(pwd)/.devcarry
  export LD_LIBRARY_PATH="$C/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
}
stamp() { echo "== [$(( $(date +%s) - t0 )) s] $*"; }
make_pair() {
  local d=$1
  shift
  [ -f "$d/target.gguf" ] && [ -f "$d/draft.gguf" ] && return 0
  timeout 120 "$C/bin/specd" make-model --preset qwen3-27b --type Q4_K_S --fill blocks --sync=false --pair \
    --draft-layers 6 --draft-type Q4_K_M "$@" --out "$d" > "$O/mk.$(basename "$d").txt" 2>&1
}
