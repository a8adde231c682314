#!/usr/bin/env python3
"""Independent float64 reference forward pass for llama / qwen2 / qwen3 GGUF files.

Reads the file with the `gguf` package (the format's own reader) and
dequantizes with its numpy dequantizers, then runs the transformer in float64
numpy, written from the architectures' definitions (not from specd's code).

usage: ref_model.py MODEL.gguf TOKENS_CSV OUT.bin
    Writes float64 logits for every position, row-major [n_tokens, vocab], raw
    little-endian.
usage: ref_model.py MODEL.gguf TOKENS_CSV --greedy N
    Prints the N tokens greedy decoding appends (comma-separated).
"""
import sys

import numpy as np
import gguf


def field(reader, key, default=None):
    f = reader.fields.get(key)
    if f is None:
        return default
    v = f.parts[f.data[0]]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(v).decode("utf-8")
    return v.tolist()[0]


def load_tensors(reader):
    out = {}
    for t in reader.tensors:
        shape = [int(x) for x in t.shape]  # ne order: ne[0] innermost
        arr = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        arr = arr.reshape(list(reversed(shape)))  # numpy order: [ne1, ne0]
        out[t.name] = arr
    return out


def rms_norm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, n_dims, base, scale, neox):
    # x: [n, heads, head_dim]
    half = n_dims // 2
    inv = base ** (-2.0 * np.arange(half) / n_dims) * scale
    ang = pos[:, None].astype(np.float64) * inv[None, :]  # [n, half]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    y = x.copy()
    if neox:
        a, b = x[..., :half], x[..., half:n_dims]
        y[..., :half] = a * c - b * s
        y[..., half:n_dims] = a * s + b * c
    else:
        a, b = x[..., 0:n_dims:2], x[..., 1:n_dims:2]
        y[..., 0:n_dims:2] = a * c - b * s
        y[..., 1:n_dims:2] = a * s + b * c
    return y


_READERS = {}


def forward(path, tokens):
    if path not in _READERS:
        _READERS[path] = gguf.GGUFReader(path)
    r = _READERS[path]
    arch = field(r, "general.architecture")
    p = arch + "."
    L = field(r, p + "block_count")
    d = field(r, p + "embedding_length")
    nh = field(r, p + "attention.head_count")
    nkv = field(r, p + "attention.head_count_kv", nh)
    hd = field(r, p + "attention.key_length", d // nh)
    eps = field(r, p + "attention.layer_norm_rms_epsilon", 1e-5)
    base = field(r, p + "rope.freq_base", 10000.0)
    n_rot = field(r, p + "rope.dimension_count", hd)
    scale = 1.0
    if field(r, p + "rope.scaling.type", "none") == "linear":
        scale = 1.0 / field(r, p + "rope.scaling.factor")
    neox = arch in ("qwen2", "qwen3")
    if not hasattr(r, "specd_weights"):
        r.specd_weights = load_tensors(r)
    W = r.specd_weights
    n = len(tokens)
    pos = np.arange(n)
    x = W["token_embd.weight"][tokens]  # [n, d]
    mask = np.triu(np.full((n, n), -np.inf), 1)
    for l in range(L):
        b = "blk.%d." % l
        h = rms_norm(x, W[b + "attn_norm.weight"], eps)
        q = h @ W[b + "attn_q.weight"].T
        k = h @ W[b + "attn_k.weight"].T
        v = h @ W[b + "attn_v.weight"].T
        if b + "attn_q.bias" in W:
            q += W[b + "attn_q.bias"]
            k += W[b + "attn_k.bias"]
            v += W[b + "attn_v.bias"]
        q = q.reshape(n, nh, hd)
        k = k.reshape(n, nkv, hd)
        v = v.reshape(n, nkv, hd)
        if b + "attn_q_norm.weight" in W:
            q = rms_norm(q, W[b + "attn_q_norm.weight"], eps)
            k = rms_norm(k, W[b + "attn_k_norm.weight"], eps)
        q = rope(q, pos, n_rot, base, scale, neox)
        k = rope(k, pos, n_rot, base, scale, neox)
        g = nh // nkv
        att = np.zeros((n, nh, hd))
        for hh in range(nh):
            kh = k[:, hh // g, :]
            vh = v[:, hh // g, :]
            s = (q[:, hh, :] @ kh.T) / np.sqrt(hd) + mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            s /= s.sum(axis=1, keepdims=True)
            att[:, hh, :] = s @ vh
        x = x + att.reshape(n, nh * hd) @ W[b + "attn_output.weight"].T
        h = rms_norm(x, W[b + "ffn_norm.weight"], eps)
        gt = h @ W[b + "ffn_gate.weight"].T
        up = h @ W[b + "ffn_up.weight"].T
        x = x + (gt / (1.0 + np.exp(-gt)) * up) @ W[b + "ffn_down.weight"].T
    x = rms_norm(x, W["output_norm.weight"], eps)
    out = W.get("output.weight", W["token_embd.weight"])
    return x @ out.T


def main():
    path, toks = sys.argv[1], sys.argv[2]
    tokens = [int(t) for t in toks.split(",")]
    if sys.argv[3] == "--greedy":
        out = []
        for _ in range(int(sys.argv[4])):
            logits = forward(path, np.array(tokens + out, dtype=np.int64))
            out.append(int(np.argmax(logits[-1])))
        print(",".join(str(t) for t in out))
        return
    logits = forward(path, np.array(tokens, dtype=np.int64))
    logits.astype("<f8").tofile(sys.argv[3])


if __name__ == "__main__":
    main()
