#!/usr/bin/env bash
# Round 38's call E pack, .devpackE38/devcarry.tar.xz (carry [".devpackE38"]): this tree's specd, the three
# services and gpu_check with their libraries, and specd.shrink (exp-shrink.patch on common/spec/policy.cc).
set -euo pipefail
cd "$(dirname "$0")/../../.."
PACK_BINS="specd specd-coordinator specd-draft-worker specd-target-worker gpu_check" \
  tests/gpu/pack_variants.sh .devpackE38 docs/runs/round38/exp-shrink.patch common/spec/policy.cc shrink
