#!/usr/bin/env python3
"""Independent tokenizer references for tests/unit/tokenizer_test.cc.

Strings travel as one hex-encoded UTF-8 string per line; results come back
one line per input: token ids separated by spaces, or hex pieces for `split`.

  spm-train WORKDIR VOCAB      train a SentencePiece BPE model (byte fallback) on
                               WORKDIR/corpus.txt, write WORKDIR/sp.gguf (tokenizer
                               metadata only, python gguf writer) and encode
                               WORKDIR/inputs.hex with sentencepiece -> WORKDIR/ref.txt
  hf-gguf GGUF KIND IN OUT     build an HF `tokenizers` BPE from GGUF's vocab and
                               merges (python gguf reader) with the KIND pre-tokenizer
                               (gpt2|smollm|llama3|qwen2), encode IN -> OUT
  hf-train WORKDIR KIND VOCAB  train an HF byte-level BPE with the KIND pre-tokenizer on
                               WORKDIR/corpus.txt, write WORKDIR/KIND.gguf, encode
                               WORKDIR/inputs.hex -> WORKDIR/ref_KIND.txt
  llamacpp GGUF IN OUT SPECIAL tokenize with llama.cpp itself (llama_cpp, optional)
  split KIND IN OUT            pre-tokenize only (HF Split/Digits), hex pieces
  chat IN OUT                  render chat templates with jinja2; IN is JSON
                               [{"template", "messages", "add_generation_prompt", "bos_token"}]
"""
import json
import sys

GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GGUF_PRE = {"gpt2": "gpt-2", "smollm": "smollm", "llama3": "llama-bpe", "qwen2": "qwen2"}


def read_inputs(path):
    with open(path, encoding="ascii") as f:
        return [bytes.fromhex(line.rstrip("\n")).decode("utf-8") for line in f]


def write_lines(path, lines):
    with open(path, "w", encoding="ascii") as f:
        for line in lines:
            f.write(line + "\n")


def ids_line(ids):
    return " ".join(str(i) for i in ids)


def pre_tokenizer(kind, byte_level=True):
    from tokenizers import Regex, pre_tokenizers as pt
    if kind in ("gpt2", "smollm"):
        seq = [pt.Digits(individual_digits=True)] if kind == "smollm" else []
        if byte_level:
            seq.append(pt.ByteLevel(add_prefix_space=False, use_regex=True))
        else:
            seq.append(pt.Split(Regex(GPT2), behavior="isolated"))
        return pt.Sequence(seq) if len(seq) > 1 else seq[0]
    pattern = {"llama3": LLAMA3, "qwen2": QWEN2}[kind]
    split = pt.Split(Regex(pattern), behavior="isolated")
    if not byte_level:
        return split
    return pt.Sequence([split, pt.ByteLevel(add_prefix_space=False, use_regex=False)])


def read_gguf_vocab(path):
    from gguf import GGUFReader
    r = GGUFReader(path)

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    def ints(key):
        f = r.fields.get(key)
        return None if f is None else [int(f.parts[i][0]) for i in f.data]

    return strings("tokenizer.ggml.tokens"), strings("tokenizer.ggml.merges"), ints("tokenizer.ggml.token_type")


def build_hf(tokens, merges, types, kind):
    from tokenizers import AddedToken, Tokenizer, decoders, models
    vocab = {}
    for i, t in enumerate(tokens):
        vocab[t] = i  # last wins, as llama.cpp's token_to_id
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    bpe = models.BPE(vocab=vocab, merges=pairs, ignore_merges=(kind == "llama3"))
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizer(kind)
    tok.decoder = decoders.ByteLevel()
    special = [t for t, ty in zip(tokens, types or [1] * len(tokens)) if ty == 3]
    if special:
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    return tok


def cmd_hf_gguf(gguf_path, kind, inp, out):
    tokens, merges, types = read_gguf_vocab(gguf_path)
    tok = build_hf(tokens, merges, types, kind)
    write_lines(out, [ids_line(tok.encode(s, add_special_tokens=False).ids) for s in read_inputs(inp)])


def write_tokenizer_gguf(path, kv):
    import gguf
    w = gguf.GGUFWriter(path, arch="llama")
    kv(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def cmd_hf_train(workdir, kind, vocab_size):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer(kind)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=int(vocab_size), special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([f"{workdir}/corpus.txt"], trainer)
    model = json.loads(tok.to_str())["model"]
    vocab = model["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    types = [3 if t in specials else 1 for t in tokens]

    def kv(w):
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(GGUF_PRE[kind])
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_bos_token_id(0)
        w.add_eos_token_id(2)
        w.add_add_bos_token(False)
    write_tokenizer_gguf(f"{workdir}/{kind}.gguf", kv)
    hf = build_hf(tokens, merges, types, kind)
    inputs = read_inputs(f"{workdir}/inputs.hex")
    write_lines(f"{workdir}/ref_{kind}.txt", [ids_line(hf.encode(s, add_special_tokens=False).ids) for s in inputs])


def cmd_spm_train(workdir, vocab_size):
    import sentencepiece as spm
    spm.SentencePieceTrainer.train(
        input=f"{workdir}/corpus.txt", model_prefix=f"{workdir}/sp", vocab_size=int(vocab_size),
        model_type="bpe", byte_fallback=True, normalization_rule_name="identity", add_dummy_prefix=True,
        remove_extra_whitespaces=False, character_coverage=1.0, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=f"{workdir}/sp.model")
    n = sp.get_piece_size()
    pieces = [sp.id_to_piece(i) for i in range(n)]
    scores = [sp.get_score(i) for i in range(n)]
    types = []
    for i in range(n):
        if sp.is_unknown(i):
            types.append(2)
        elif sp.is_control(i):
            types.append(3)
        elif sp.is_unused(i):
            types.append(5)
        elif sp.is_byte(i):
            types.append(6)
        else:
            types.append(1)

    def kv(w):
        w.add_tokenizer_model("llama")
        w.add_token_list(pieces)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(sp.bos_id())
        w.add_eos_token_id(sp.eos_id())
        w.add_unk_token_id(sp.unk_id())
        w.add_add_space_prefix(True)
    write_tokenizer_gguf(f"{workdir}/sp.gguf", kv)
    inputs = read_inputs(f"{workdir}/inputs.hex")
    write_lines(f"{workdir}/ref.txt", [ids_line(sp.encode(s)) for s in inputs])
    # Round trip through sentencepiece's own decoder, for the decode check.
    write_lines(f"{workdir}/ref_decoded.txt", [sp.decode(sp.encode(s)).encode("utf-8").hex() for s in inputs])


def cmd_llamacpp(gguf_path, inp, out, special):
    import llama_cpp
    m = llama_cpp.Llama(model_path=gguf_path, vocab_only=True, verbose=False)
    res = [ids_line(m.tokenize(s.encode("utf-8"), add_bos=False, special=special == "1")) for s in read_inputs(inp)]
    write_lines(out, res)


def cmd_split(kind, inp, out):
    pt = pre_tokenizer(kind, byte_level=False)
    res = []
    for s in read_inputs(inp):
        res.append(" ".join(p.encode("utf-8").hex() for p, _ in pt.pre_tokenize_str(s)))
    write_lines(out, res)


def cmd_chat(inp, out):
    import jinja2
    env = jinja2.Environment(trim_blocks=False, lstrip_blocks=False)
    with open(inp, encoding="utf-8") as f:
        cases = json.load(f)
    res = []
    for c in cases:
        t = env.from_string(c["template"])
        s = t.render(messages=c["messages"], add_generation_prompt=c["add_generation_prompt"],
                     bos_token=c.get("bos_token", ""), eos_token=c.get("eos_token", ""))
        res.append(s.encode("utf-8").hex())
    write_lines(out, res)


def main(argv):
    cmds = {"spm-train": cmd_spm_train, "hf-gguf": cmd_hf_gguf, "hf-train": cmd_hf_train,
            "llamacpp": cmd_llamacpp, "split": cmd_split, "chat": cmd_chat}
    if len(argv) < 2 or argv[1] not in cmds:
        sys.stderr.write(__doc__)
        return 2
    cmds[argv[1]](*argv[2:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
