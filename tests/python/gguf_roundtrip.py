#!/usr/bin/env python3
"""Cross-checks specd's GGUF reader/writer against the format's own Python
implementation (PyPI `gguf`). Driven by tests/unit/gguf_test.cc.

  gguf_roundtrip.py dump FILE              print FILE as JSON (gguf.GGUFReader's view)
  gguf_roundtrip.py compare FILE EXPECTED  dump FILE and compare it with the JSON in
                                           EXPECTED (same schema); exit 1 on mismatch
  gguf_roundtrip.py write FILE             write a fixed file with gguf.GGUFWriter,
                                           then print its dump

JSON schema (shared with the C++ side):
  {"version": 3, "alignment": 32, "data_offset": N,
   "metadata": [{"key": k, "type": "UINT32", "value": v},
                {"key": k, "type": "ARRAY", "elem_type": "INT32", "value": [...]},
                {"key": k, "type": "ARRAY", "elem_type": "ARRAY", "count": n}],
   "tensors": [{"name": s, "type": "Q8_0", "ne": [...], "offset": n,
                "nbytes": n, "data": "hex"}]}
Offsets are relative to the data section; floats are compared as doubles.
"""
import json
import sys

import numpy as np

try:
    import gguf
    from gguf import GGUFReader, GGUFValueType, GGUFWriter, GGMLQuantizationType
except ImportError as e:  # the C++ test turns this into a clear failure/skip
    print(f"gguf_roundtrip.py: cannot import the PyPI 'gguf' package: {e}", file=sys.stderr)
    sys.exit(3)


def dump(path):
    r = GGUFReader(path, "r")
    meta = []
    for name, f in r.fields.items():
        if name.startswith("GGUF."):  # the reader's pseudo-fields for the header
            continue
        t = GGUFValueType(int(f.types[0]))
        e = {"key": name, "type": t.name}
        if t == GGUFValueType.ARRAY:
            # parts: key len, key, type, elem type, count, elements...; read the
            # elem type from the file since an empty array has no typed parts.
            elem = GGUFValueType(int(f.parts[3][0]))
            e["elem_type"] = elem.name
            if elem == GGUFValueType.ARRAY:
                e["count"] = int(f.parts[4][0])
            else:
                e["value"] = list(f.contents())
        else:
            e["value"] = f.contents()
        meta.append(e)
    tensors = []
    for t in r.tensors:
        raw = bytes(r.data[t.data_offset:t.data_offset + t.n_bytes])
        tensors.append({
            "name": t.name,
            "type": GGMLQuantizationType(int(t.tensor_type)).name,
            "ne": [int(d) for d in t.shape],
            "offset": int(t.data_offset - r.data_offset),
            "nbytes": int(t.n_bytes),
            "data": raw.hex(),
        })
    return {
        "version": int(r.fields["GGUF.version"].parts[0][0]),
        "alignment": int(r.alignment),
        "data_offset": int(r.data_offset),
        "metadata": meta,
        "tensors": tensors,
    }


def first_difference(a, b, where="$"):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{where}.{k}: only in {'expected' if k in a else 'gguf-py'}"
            d = first_difference(a[k], b[k], f"{where}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: length {len(a)} (expected) != {len(b)} (gguf-py)"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{where}[{i}]")
            if d:
                return d
        return None
    # bool is an int in Python: keep true != 1.
    if isinstance(a, bool) != isinstance(b, bool) or a != b:
        return f"{where}: {a!r} (expected) != {b!r} (gguf-py)"
    return None


def write(path):
    w = GGUFWriter(path, "llama")  # writes general.architecture first
    w.add_custom_alignment(64)
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 65535)
    w.add_int16("t.i16", -32768)
    w.add_uint32("llama.block_count", 2)
    w.add_int32("t.i32", -123456)
    w.add_float32("t.f32", 0.25)
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**62))
    w.add_float64("t.f64", 3.141592653589793)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "h\u00e9llo \u4e16\u754c")
    w.add_array("t.arr_str", ["a", "bc", "", "\u00fc"])
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_f32", [0.5, -1.25, 3.0])
    w.add_array("t.arr_bool", [True, False, True])
    w.add_key_value("t.arr_u8", [1, 2, 255], GGUFValueType.ARRAY, sub_type=GGUFValueType.UINT8)
    w.add_key_value("t.arr_u64", [0, 2**64 - 1], GGUFValueType.ARRAY, sub_type=GGUFValueType.UINT64)
    w.add_key_value("t.arr_f64", [1e-300, -2.5], GGUFValueType.ARRAY, sub_type=GGUFValueType.FLOAT64)
    w.add_key_value("t.nested", [[1, 2], [3]], GGUFValueType.ARRAY)  # array of arrays
    w.add_tensor("tok_embd.weight", np.arange(64, dtype=np.float32).reshape(4, 16))
    w.add_tensor("f16", (np.arange(24, dtype=np.float16) / 8).reshape(3, 8))
    q8 = (np.arange(2 * 68) % 251).astype(np.uint8).reshape(2, 68)  # 2 rows of 2 Q8_0 blocks
    w.add_tensor("q8", q8, raw_dtype=GGMLQuantizationType.Q8_0)
    w.add_tensor("i32", np.array([5, -4, 3, -2, 1], dtype=np.int32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main(argv):
    if len(argv) >= 3 and argv[1] == "dump":
        print(json.dumps(dump(argv[2]), ensure_ascii=False))
        return 0
    if len(argv) >= 4 and argv[1] == "compare":
        got = dump(argv[2])
        with open(argv[3], encoding="utf-8") as f:
            want = json.load(f)
        print(json.dumps(got, ensure_ascii=False))
        diff = first_difference(want, got)
        if diff:
            print(f"MISMATCH {diff}", file=sys.stderr)
            return 1
        return 0
    if len(argv) >= 3 and argv[1] == "write":
        write(argv[2])
        print(json.dumps(dump(argv[2]), ensure_ascii=False))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
