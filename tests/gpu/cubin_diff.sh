#!/usr/bin/env bash
# Which kernels of a CUDA source file compile to different machine code at git ref REF than in the working
# tree: both versions built to sm_90 cubins (Release flags), each kernel's .text section compared byte for
# byte. A refactor that leaves a kernel's bytes alone needs no new measurement of that kernel (round 31:
# KUnit / KMins shared by the per-tile and wide matvecs, every per-tile kernel unchanged). No GPU needed;
# needs python3-pyelftools (apt) for Debian's /usr/bin/python3.
#   tests/gpu/cubin_diff.sh REF FILE [REGEX]      e.g. tests/gpu/cubin_diff.sh 7bace52 common/backend/cuda/k_matvec.cu
# Prints one line per kernel: "same", "differs (OLD -> NEW bytes)", "only at REF" or "only here"; REGEX keeps
# the kernels whose mangled name matches.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { sed -n 2,10p "$0"; exit 2; }
ref=$1 file=$2 filter=${3:-.}
build=${BUILD_DIR:-build-cuda}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "${file%.cu}_cubin_diff_ref.cu"' EXIT
# The old version compiled from the file's own folder, so that its includes resolve as the tree's do.
old_src="${file%.cu}_cubin_diff_ref.cu"
git show "$ref:$file" > "$old_src"
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
flags=(-DSPECD_HAVE_CUDA=1 -I. -I"$build" -O3 -DNDEBUG -arch=sm_90 --expt-relaxed-constexpr -std=c++20 -cubin -x cu)
"$nvcc" "${flags[@]}" "$old_src" -o "$tmp/old.cubin"
"$nvcc" "${flags[@]}" "$file" -o "$tmp/new.cubin"
/usr/bin/python3 - "$tmp/old.cubin" "$tmp/new.cubin" "$filter" <<'EOF'
import re
import sys

from elftools.elf.elffile import ELFFile


def kernels(path):
    with open(path, "rb") as f:
        elf = ELFFile(f)
        # The anonymous namespace's mangled name carries the source file's name: drop it.
        return {re.sub(r"_GLOBAL__N__\w+?_cu_[0-9a-f]+", "", re.sub(r"4cuda\d+", "4cuda", s.name[6:])): s.data()
                for s in elf.iter_sections() if s.name.startswith(".text.")}


old, new, pattern = kernels(sys.argv[1]), kernels(sys.argv[2]), re.compile(sys.argv[3])
counts = {}
for name in sorted(set(old) | set(new)):
    if not pattern.search(name):
        continue
    if name not in new:
        verdict = "only at REF"
    elif name not in old:
        verdict = "only here"
    elif old[name] == new[name]:
        verdict = "same"
    else:
        verdict = f"differs ({len(old[name])} -> {len(new[name])} bytes)"
    counts[verdict.split(" (")[0]] = counts.get(verdict.split(" (")[0], 0) + 1
    print(f"{verdict:32s} {name}")
print("summary:", ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
EOF
