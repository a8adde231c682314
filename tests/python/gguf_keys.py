#!/usr/bin/env python3
"""Checks a GGUF file against what the GGUF spec and llama.cpp require of a
llama / qwen2 / qwen3 model, reading it with the format's own Python package
(PyPI `gguf`). Driven by tests/integration/gguf_interop_test.cc.

  gguf_keys.py FILE EXPECT_JSON

EXPECT_JSON (every field optional except "arch"):
  {"arch": "qwen3", "file_type": "MOSTLY_Q4_K_M", "block_count": 2,
   "embedding_length": 256, "feed_forward_length": 512, "head_count": 4,
   "head_count_kv": 2, "key_length": 32, "context_length": 2048,
   "vocab_size": 512, "tokenizer": "gpt2", "tied_output": true,
   "tensor_types": {"output.weight": "Q6_K", "blk.0.ffn_down.weight": "Q5_K"}}

Checked:
  - every key is one of the table below (an unknown key fails) and has the
    type the spec / llama.cpp's loader reads it with (llama.cpp refuses a
    scalar of another type: "key X has wrong type str but expected type u32");
  - required keys are present; values equal the expectations given;
  - general.file_type is a llama_ftype (gguf.LlamaFileType) and
    general.quantization_version (GGML_QUANT_VERSION) is present when, and
    only when, a tensor is quantized;
  - tensor names are the architecture's (gguf.MODEL_TENSORS), the ones
    llama.cpp requires are present, shapes are what llama.cpp creates;
  - tokenizer arrays have one entry per token, token strings are unique
    (llama.cpp asserts it), special ids are in range;
  - the data section and every tensor are aligned.
Prints "ok: ..." and exits 0, or lists every problem and exits 1.
"""
import json
import sys

try:
    import gguf
    from gguf import GGMLQuantizationType as Q
    from gguf import GGUFValueType as V
except ImportError as e:
    print(f"gguf_keys.py: cannot import the PyPI 'gguf' package: {e}", file=sys.stderr)
    sys.exit(3)

K = gguf.Keys
# Key -> (type, array element type or None). Types as the GGUF spec
# (docs/gguf.md) gives them and llama.cpp's loader (llama-model-loader.cpp
# GKV::get_kv, llama-vocab.cpp) reads them.
GENERAL = {
    K.General.ARCHITECTURE: (V.STRING, None),
    K.General.NAME: (V.STRING, None),
    K.General.FILE_TYPE: (V.UINT32, None),
    K.General.QUANTIZATION_VERSION: (V.UINT32, None),
    K.General.ALIGNMENT: (V.UINT32, None),
    # specd's own provenance keys (llama.cpp ignores keys it does not know).
    "specd.generator.seed": (V.UINT64, None),
    "specd.generator.fill": (V.STRING, None),
}
PER_ARCH = {
    K.LLM.CONTEXT_LENGTH: (V.UINT32, None),
    K.LLM.EMBEDDING_LENGTH: (V.UINT32, None),
    K.LLM.BLOCK_COUNT: (V.UINT32, None),
    K.LLM.FEED_FORWARD_LENGTH: (V.UINT32, None),
    K.LLM.VOCAB_SIZE: (V.UINT32, None),
    K.Attention.HEAD_COUNT: (V.UINT32, None),
    K.Attention.HEAD_COUNT_KV: (V.UINT32, None),
    K.Attention.KEY_LENGTH: (V.UINT32, None),
    K.Attention.VALUE_LENGTH: (V.UINT32, None),
    K.Attention.LAYERNORM_RMS_EPS: (V.FLOAT32, None),
    K.Rope.DIMENSION_COUNT: (V.UINT32, None),
    K.Rope.FREQ_BASE: (V.FLOAT32, None),
}
TOKENIZER = {
    K.Tokenizer.MODEL: (V.STRING, None),
    K.Tokenizer.PRE: (V.STRING, None),
    K.Tokenizer.LIST: (V.ARRAY, V.STRING),
    K.Tokenizer.TOKEN_TYPE: (V.ARRAY, V.INT32),
    K.Tokenizer.SCORES: (V.ARRAY, V.FLOAT32),
    K.Tokenizer.MERGES: (V.ARRAY, V.STRING),
    K.Tokenizer.BOS_ID: (V.UINT32, None),
    K.Tokenizer.EOS_ID: (V.UINT32, None),
    K.Tokenizer.UNK_ID: (V.UINT32, None),
    K.Tokenizer.PAD_ID: (V.UINT32, None),
    K.Tokenizer.ADD_BOS: (V.BOOL, None),
    K.Tokenizer.ADD_EOS: (V.BOOL, None),
    K.Tokenizer.ADD_PREFIX: (V.BOOL, None),
    K.Tokenizer.CHAT_TEMPLATE: (V.STRING, None),
}
REQUIRED_PER_ARCH = [K.LLM.CONTEXT_LENGTH, K.LLM.EMBEDDING_LENGTH, K.LLM.BLOCK_COUNT,
                     K.LLM.FEED_FORWARD_LENGTH, K.Attention.HEAD_COUNT, K.Attention.LAYERNORM_RMS_EPS]
ARCHS = {"llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2, "qwen3": gguf.MODEL_ARCH.QWEN3}
FLOAT_TYPES = {Q.F32, Q.F16, Q.BF16}


def field_types(f):
    t = V(int(f.types[0]))
    elem = V(int(f.parts[3][0])) if t == V.ARRAY else None  # read from the file: an empty array has no typed parts
    return t, elem


def main():
    path, want = sys.argv[1], json.loads(sys.argv[2])
    arch = want["arch"]
    problems = []
    r = gguf.GGUFReader(path, "r")
    table = dict(GENERAL)
    table.update({k.format(arch=arch): v for k, v in PER_ARCH.items()})
    table.update(TOKENIZER)

    meta = {}
    for name, f in r.fields.items():
        if name.startswith("GGUF."):  # the reader's pseudo-fields for the header
            continue
        if name not in table:
            problems.append(f"unknown key {name}")
            continue
        t, elem = field_types(f)
        want_t, want_elem = table[name]
        if (t, elem) != (want_t, want_elem):
            got = t.name + (f"[{elem.name}]" if elem else "")
            exp = want_t.name + (f"[{want_elem.name}]" if want_elem else "")
            problems.append(f"{name}: type {got}, expected {exp}")
            continue
        meta[name] = f.contents()

    def need(key):
        if key not in meta:
            problems.append(f"missing key {key}")
            return None
        return meta[key]

    if need(K.General.ARCHITECTURE) not in (None, arch):
        problems.append(f"general.architecture {meta[K.General.ARCHITECTURE]!r}, expected {arch!r}")
    for k in REQUIRED_PER_ARCH:
        need(k.format(arch=arch))
    expect_keys = {
        "block_count": K.LLM.BLOCK_COUNT, "embedding_length": K.LLM.EMBEDDING_LENGTH,
        "feed_forward_length": K.LLM.FEED_FORWARD_LENGTH, "context_length": K.LLM.CONTEXT_LENGTH,
        "head_count": K.Attention.HEAD_COUNT, "head_count_kv": K.Attention.HEAD_COUNT_KV,
        "key_length": K.Attention.KEY_LENGTH,
    }
    for field, key in expect_keys.items():
        if field in want:
            got = need(key.format(arch=arch))
            if got is not None and got != want[field]:
                problems.append(f"{key.format(arch=arch)} = {got}, expected {want[field]}")

    # general.file_type: a llama_ftype; the expected one by llama.cpp's name.
    ft = need(K.General.FILE_TYPE)
    if ft is not None:
        try:
            ftype = gguf.LlamaFileType(ft)
        except ValueError:
            problems.append(f"general.file_type {ft} is not a llama_ftype")
            ftype = None
        if "file_type" in want and ftype is not None and ftype.name != want["file_type"]:
            problems.append(f"general.file_type {ftype.name} ({ft}), expected {want['file_type']}")

    # Tokenizer.
    tokens = need(K.Tokenizer.LIST) or []
    n_tok = len(tokens)
    if "vocab_size" in want and n_tok != want["vocab_size"]:
        problems.append(f"{n_tok} tokens, expected {want['vocab_size']}")
    if len(set(tokens)) != n_tok:
        problems.append("token strings are not unique (llama.cpp asserts they are)")
    model = need(K.Tokenizer.MODEL)
    if "tokenizer" in want and model != want["tokenizer"]:
        problems.append(f"tokenizer.ggml.model {model!r}, expected {want['tokenizer']!r}")
    for key in (K.Tokenizer.TOKEN_TYPE, K.Tokenizer.SCORES):
        if key in meta and len(meta[key]) != n_tok:
            problems.append(f"{key} has {len(meta[key])} entries for {n_tok} tokens")
    if model == "gpt2":
        need(K.Tokenizer.MERGES)  # llama.cpp: "cannot find tokenizer merges in model file"
    for key in (K.Tokenizer.BOS_ID, K.Tokenizer.EOS_ID, K.Tokenizer.UNK_ID, K.Tokenizer.PAD_ID):
        if key in meta and not 0 <= meta[key] < n_tok:
            problems.append(f"{key} = {meta[key]} is outside the {n_tok} tokens")

    # Tensors: names, presence, shapes, alignment.
    allowed = {}
    for t in gguf.MODEL_TENSORS[ARCHS[arch]]:
        allowed[gguf.TENSOR_NAMES[t]] = t
    n_layer = meta.get(K.LLM.BLOCK_COUNT.format(arch=arch), 0)
    n_embd = meta.get(K.LLM.EMBEDDING_LENGTH.format(arch=arch), 0)
    n_ff = meta.get(K.LLM.FEED_FORWARD_LENGTH.format(arch=arch), 0)
    n_head = meta.get(K.Attention.HEAD_COUNT.format(arch=arch), 1)
    n_head_kv = meta.get(K.Attention.HEAD_COUNT_KV.format(arch=arch), n_head)
    head_k = meta.get(K.Attention.KEY_LENGTH.format(arch=arch), n_embd // max(n_head, 1))
    q_dim, kv_dim = head_k * n_head, head_k * n_head_kv
    shapes = {"token_embd.weight": [n_embd, n_tok], "output_norm.weight": [n_embd],
              "output.weight": [n_embd, n_tok]}
    for i in range(n_layer):
        b = f"blk.{i}."
        shapes.update({b + "attn_norm.weight": [n_embd], b + "attn_q.weight": [n_embd, q_dim],
                       b + "attn_k.weight": [n_embd, kv_dim], b + "attn_v.weight": [n_embd, kv_dim],
                       b + "attn_output.weight": [q_dim, n_embd], b + "ffn_norm.weight": [n_embd],
                       b + "ffn_gate.weight": [n_embd, n_ff], b + "ffn_up.weight": [n_embd, n_ff],
                       b + "ffn_down.weight": [n_ff, n_embd]})
        if arch == "qwen2":
            shapes.update({b + "attn_q.bias": [q_dim], b + "attn_k.bias": [kv_dim], b + "attn_v.bias": [kv_dim]})
        if arch == "qwen3":
            shapes.update({b + "attn_q_norm.weight": [head_k], b + "attn_k_norm.weight": [head_k]})
    optional = {"output.weight"}
    if want.get("tied_output") is True:
        shapes.pop("output.weight")
    if r.data_offset % r.alignment:
        problems.append(f"data section at {r.data_offset} is not {r.alignment}-aligned")
    seen, quantized = set(), False
    for t in r.tensors:
        seen.add(t.name)
        stem, _, suffix = t.name.rpartition(".")
        generic = stem
        if stem.startswith("blk."):
            parts = stem.split(".", 2)
            generic = "blk.{bid}." + parts[2] if len(parts) == 3 else stem
            if not parts[1].isdigit() or int(parts[1]) >= n_layer:
                problems.append(f"tensor {t.name}: layer outside 0..{n_layer - 1}")
        if generic not in allowed or suffix not in ("weight", "bias"):
            problems.append(f"tensor {t.name} is not a {arch} tensor llama.cpp knows")
        elif t.name not in shapes:
            problems.append(f"tensor {t.name} is not one llama.cpp creates for this file")
        ne = [int(d) for d in t.shape]
        if t.name in shapes and ne != shapes[t.name]:
            problems.append(f"tensor {t.name}: shape {ne}, expected {shapes[t.name]}")
        qt = Q(int(t.tensor_type))
        quantized |= qt not in FLOAT_TYPES
        if len(ne) == 1 and qt != Q.F32:
            problems.append(f"tensor {t.name}: 1-D tensors must be F32, not {qt.name}")
        if (t.data_offset - r.data_offset) % r.alignment:
            problems.append(f"tensor {t.name} is not {r.alignment}-aligned")
        want_type = want.get("tensor_types", {}).get(t.name)
        if want_type and qt.name != want_type:
            problems.append(f"tensor {t.name}: type {qt.name}, expected {want_type}")
    for name in shapes:
        if name not in seen and name not in optional:
            problems.append(f"missing tensor {name}")
    if want.get("tied_output") is False and "output.weight" not in seen:
        problems.append("missing tensor output.weight")
    qv = meta.get(K.General.QUANTIZATION_VERSION)
    if quantized and qv != gguf.GGML_QUANT_VERSION:
        problems.append(f"general.quantization_version {qv}, expected {gguf.GGML_QUANT_VERSION} (tensors are quantized)")
    if not quantized and qv is not None:
        problems.append("general.quantization_version set, but no tensor is quantized")

    if problems:
        print(f"{path}: {len(problems)} problem(s):")
        for p in problems:
            print("  " + p)
        return 1
    print(f"ok: {path}: {len(meta)} keys, {len(r.tensors)} tensors, file_type "
          f"{gguf.LlamaFileType(meta[K.General.FILE_TYPE]).name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
