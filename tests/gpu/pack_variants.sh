#!/usr/bin/env bash
# Builds variants of this tree for one device call and packs them beside this tree's binaries:
#   tests/gpu/pack_variants.sh PACKDIR PATCH[,PATCH...] FILE[,FILE...] VARIANT...
# VARIANT is TAG[:MACRO=VALUE[,MACRO=VALUE...][:+gpu_check]]. For each, the FILEs (those the patches
# touch; the first takes the macros) are restored, the PATCHes applied,
# the macros #defined at FILE's top, and specd (with +gpu_check also gpu_check) built in build-cuda and kept
# as .devcarry/bin/specd.TAG (gpu_check.TAG); this tree's specd and gpu_check come from
# tests/gpu/make_carry.sh (PACK_BINS: which of this tree's binaries, default "specd gpu_check"; gpu_check
# must be among them). Writes PACKDIR/devcarry.tar.xz (carry ["PACKDIR"]); the FILEs are restored.
# PACK_EXTRA=CMD: a command run before the pack is written (more binaries into .devcarry/bin).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 4 ] || { echo "usage: $0 PACKDIR PATCH[,PATCH...] FILE[,FILE...] TAG[:MACRO=VALUE,...[:+gpu_check]]..." >&2; exit 2; }
out=$1
IFS=, read -ra patches <<< "$2"
IFS=, read -ra files <<< "$3"
shift 3
git diff --quiet -- "${files[@]}" || { echo "pack_variants: ${files[*]} have local changes; commit or stash them first" >&2; exit 2; }
# This tree's specd and gpu_check first: make_carry.sh configures build-cuda with the tests (so the
# variants' gpu_check builds there too) and gathers the libraries every build shares.
BUILD_DIR=build-cuda CARRY_MODELS=0 CARRY_BINS="${PACK_BINS:-specd gpu_check}" tests/gpu/make_carry.sh > /dev/null
trap 'git checkout -- "${files[@]}"' EXIT
for v in "$@"; do
  IFS=: read -r tag defs extra <<< "$v"
  git checkout -- "${files[@]}"
  git apply "${patches[@]}"
  IFS=, read -ra ds <<< "${defs:-}"
  for d in "${ds[@]}"; do sed -i "1i #define ${d%%=*} ${d#*=}" "${files[0]}"; done
  targets=specd
  [ "${extra:-}" = +gpu_check ] && targets="specd gpu_check"
  # shellcheck disable=SC2086
  ninja -C build-cuda $targets > /dev/null
  cp build-cuda/cli/specd ".devcarry/bin/specd.$tag"
  [ "${extra:-}" = +gpu_check ] && cp build-cuda/tests/gpu/gpu_check ".devcarry/bin/gpu_check.$tag"
done
git checkout -- "${files[@]}"
[ -z "${PACK_EXTRA:-}" ] || bash -c "$PACK_EXTRA"
strip .devcarry/bin/*
mkdir -p "$out"
XZ_OPT=-9 tar -cJf "$out/devcarry.tar.xz" .devcarry
du -sh "$out/devcarry.tar.xz"
