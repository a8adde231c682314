#!/usr/bin/env python3
"""Independent reference for specd's tensor digests (common/memory/
weight_manifest.h): reads a GGUF file with the PyPI `gguf` package and prints
one line per tensor, "NAME<TAB>TYPE<TAB>NBYTES<TAB>SHA256", the digest taken
with hashlib over the tensor's bytes as the file stores them. Driven by
tests/unit/memory_test.cc.

  tensor_digests.py FILE
"""
import hashlib
import sys

try:
    from gguf import GGUFReader
except ImportError as e:
    print(f"tensor_digests.py: cannot import the PyPI 'gguf' package: {e}", file=sys.stderr)
    sys.exit(3)


def main(path):
    r = GGUFReader(path, "r")
    for t in r.tensors:
        data = t.data.tobytes()
        if len(data) != int(t.n_bytes):
            print(f"{t.name}: {len(data)} bytes read, header says {t.n_bytes}", file=sys.stderr)
            return 1
        print(f"{t.name}\t{int(t.tensor_type)}\t{len(data)}\t{hashlib.sha256(data).hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
