#!/usr/bin/env python3
"""Independent reference for tests/unit/quant_test.cc: gguf-py's numpy
(de)quantizers, i.e. the GGUF format's own Python implementation.

Usage: quant_ref.py MANIFEST

Each MANIFEST line is "<op> <TYPE> <in> <out>" (paths without spaces):
  dequant  in: raw little-endian blocks of TYPE; out: float32 values
           (gguf.quants.dequantize)
  quant    in: float32 values; out: raw blocks of TYPE (gguf.quants.quantize),
           or the text "unsupported: <why>" when gguf-py has no quantizer for
           TYPE (it has none for the k-quants)
One interpreter start serves the whole test. Prints "ok gguf=<v> numpy=<v>".
"""
import sys
from importlib import metadata

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        lines = [ln.split() for ln in f if ln.strip()]
    for op, tname, src, dst in lines:
        qtype = QT[tname]
        if op == "dequant":
            raw = np.fromfile(src, dtype=np.uint8)
            # Dequantizers expect rows; a single row of all blocks is fine.
            out = gguf.quants.dequantize(raw.reshape(1, -1), qtype)
            np.ascontiguousarray(out, dtype=np.float32).tofile(dst)
        elif op == "quant":
            vals = np.fromfile(src, dtype=np.float32).reshape(1, -1)
            try:
                out = gguf.quants.quantize(vals, qtype)
            except NotImplementedError as e:
                with open(dst, "w", encoding="utf-8") as g:
                    g.write(f"unsupported: {e}\n")
                continue
            np.ascontiguousarray(out).view(np.uint8).tofile(dst)
        else:
            print(f"unknown op {op!r}", file=sys.stderr)
            return 2
    print(f"ok gguf={metadata.version('gguf')} numpy={np.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
