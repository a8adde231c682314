#!/usr/bin/env python3
"""The side-by-side table of tests/gpu/peer_bench.sh: figure | llama.cpp |
specd | ratio (ours / llama.cpp), as markdown on stdout, from the raw outputs:

  --llama-bench FILE   llama-bench -o jsonl lines (target and draft)
  --specd-bench FILE   {"tag": ..., "result": <specd bench --json>} lines
  --llama-log FILE     llama.cpp commands' output, in "### TAG" sections
  --specd-log FILE     specd commands' output, in "### TAG" sections
  --depth N --ntok N   the depth and generation length the run used

Figures it cannot find are shown as n/a and listed on stderr; the exit status
is 1 only when no row has both engines' figures.
"""
import argparse
import json
import re
import sys


def sections(path):
    """{tag: text} of a log written by peer_bench.sh's run()."""
    out, tag, buf = {}, None, []
    try:
        lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    except OSError:
        return out
    for line in lines:
        m = re.match(r"### (end )?(\S+)", line)
        if m and not m.group(1):
            tag, buf = m.group(2), []
            continue
        if m and m.group(1) and tag == m.group(2):
            buf.append(line)  # the end line carries rc and seconds
            out[tag] = "\n".join(buf)
            tag = None
            continue
        if tag:
            buf.append(line)
    return out


def jsonl(path):
    rows = []
    try:
        for line in open(path, encoding="utf-8", errors="replace"):
            line = line.strip()
            if line.startswith("{"):
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    pass
    except OSError:
        pass
    return rows


def ok(text):
    m = re.search(r"### end \S+ rc=(\d+)", text or "")
    return m is not None and m.group(1) == "0"


def find(pattern, text, group=1, last=False):
    ms = list(re.finditer(pattern, text or ""))
    if not ms:
        return None
    return float((ms[-1] if last else ms[0]).group(group))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("--specd-bench", required=True)
    ap.add_argument("--llama-log", required=True)
    ap.add_argument("--specd-log", required=True)
    ap.add_argument("--depth", type=int, required=True)
    ap.add_argument("--ntok", type=int, required=True)
    a = ap.parse_args()
    depth = a.depth

    # llama-bench: (model, n_prompt, n_gen, n_depth) -> (avg tok/s, avg ms)
    lb = {}
    for r in jsonl(a.llama_bench):
        model = "draft" if str(r.get("model_filename", "")).endswith("draft.gguf") else "target"
        key = (model, int(r.get("n_prompt", 0)), int(r.get("n_gen", 0)), int(r.get("n_depth", 0)))
        lb[key] = (float(r["avg_ts"]), float(r["avg_ns"]) / 1e6)

    # specd bench: tag -> result
    sb = {r.get("tag"): r.get("result", {}) for r in jsonl(a.specd_bench)}

    def decode_tps(tag):
        for d in sb.get(tag, {}).get("decode", []):
            if d.get("batch") == 1 and d.get("step_seconds", 0) > 0:
                return 1.0 / d["step_seconds"]
        return None

    def verify_ms(tag, k):
        for v in sb.get(tag, {}).get("verify", []):
            if v.get("k") == k:
                return 1e3 * v["pass_seconds"]
        return None

    ll, sl = sections(a.llama_log), sections(a.specd_log)

    def llama_gen_tps(text):  # common_perf_print's eval line (not the prompt's)
        return find(r"(?<!prompt )eval time =\s*[\d.]+ ms /\s*\d+ (?:runs|tokens)\s*\(\s*[\d.]+ ms per token,"
                    r"\s*([\d.]+) tokens per second\)", text, last=True) if ok(text) else None

    def llama_spec(text):
        if not ok(text):
            return None, None
        return (find(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s", text, last=True),
                find(r"accept\s+=\s+([\d.]+)%", text, last=True))

    def specd_gen(text):
        if not ok(text):
            return None, None
        # api::FormatSummary: "N tokens in S s (T tok/s), ...; acceptance A% ..."
        return (find(r"\d+ tokens in [\d.]+ s \(([\d.]+) tok/s\)", text, last=True),
                find(r"acceptance ([\d.]+)%", text, last=True))

    rows = []  # (figure, llama, specd, lower_is_better, fmt)

    def get(key, i):
        v = lb.get(key)
        return v[i] if v else None

    def prefill_tps(tag):  # a second prefill: bench warms up as llama-bench does
        r = sb.get(tag, {})
        return r["prefill_tokens"] / r["prefill_seconds"] if r.get("prefill_seconds", 0) > 0 else None

    for tag, n in (("specd-bench-target-ctx64", 128), ("specd-bench-target-depth", 512)):
        rows.append((f"target prefill {n} tokens, tok/s (pp{n} | bench --prefill {n})", get(("target", n, 0, 0), 0),
                     prefill_tps(tag) if sb.get(tag, {}).get("prefill_tokens") == n else None, False, "{:.0f}"))
    rows.append(("target decode, depth 0, tok/s (llama-bench tg128 | bench ctx 64)",
                 get(("target", 0, 128, 0), 0), decode_tps("specd-bench-target-ctx64"), False, "{:.1f}"))
    rows.append((f"target decode, depth {depth}, tok/s (tg128 @ d{depth} | bench ctx {depth})",
                 get(("target", 0, 128, depth), 0), decode_tps("specd-bench-target-depth"), False, "{:.1f}"))
    rows.append((f"target generate {a.ntok} tokens greedy, tok/s (llama-completion | specd generate)",
                 llama_gen_tps(ll.get("llama-completion")), specd_gen(sl.get("specd-generate"))[0], False, "{:.1f}"))
    rows.append(("draft decode, depth 0, tok/s (tg128 | bench ctx 64)",
                 get(("draft", 0, 128, 0), 0), decode_tps("specd-bench-draft"), False, "{:.1f}"))
    rows.append((f"draft generate {a.ntok} tokens greedy, tok/s (llama-completion | specd generate)",
                 llama_gen_tps(ll.get("llama-completion-draft")), specd_gen(sl.get("specd-generate-draft"))[0], False,
                 "{:.1f}"))
    for n in range(2, 10):
        rows.append((f"{n}-token pass @ d{depth}, ms (pp{n} | verify k={n - 1})",
                     get(("target", n, 0, depth), 1), verify_ms("specd-bench-target-depth", n - 1), True, "{:.2f}"))
    # The pass of 7 in units of one decode step at the same depth.
    l7, ltg = get(("target", 7, 0, depth), 1), get(("target", 0, 128, depth), 0)
    s7, sdec = verify_ms("specd-bench-target-depth", 6), decode_tps("specd-bench-target-depth")
    rows.append((f"7-token pass / 1 decode step @ d{depth}, x",
                 l7 * ltg / 1e3 if l7 and ltg else None, s7 * sdec / 1e3 if s7 and sdec else None, True, "{:.2f}"))
    # Speculative rows for every N both logs ran (llama.cpp's --spec-draft-n-max N, specd's --k N).
    tags = [re.match(r"(?:llama-spec-n|specd-spec-k)(\d+)$", t) for t in list(ll) + list(sl)]
    ns = sorted({int(m.group(1)) for m in tags if m})
    spec = {n: (llama_spec(ll.get(f"llama-spec-n{n}")), specd_gen(sl.get(f"specd-spec-k{n}"))) for n in ns}
    sad, saad = specd_gen(sl.get("specd-spec-adaptive"))
    for n in ns:
        rows.append((f"speculative, {n} drafted per step, tok/s (N={n} | k={n})", spec[n][0][0], spec[n][1][0], False,
                     "{:.1f}"))
    l3 = spec.get(3, ((None, None), (None, None)))[0]
    rows.append(("speculative, default setting, tok/s (N=3 | adaptive)", l3[0], sad, False, "{:.1f}"))
    best = lambda *v: max((x for x in v if x), default=None)  # noqa: E731
    rows.append(("speculative, best setting, tok/s", best(*(spec[n][0][0] for n in ns)),
                 best(sad, *(spec[n][1][0] for n in ns)), False, "{:.1f}"))
    for n in ns:
        rows.append((f"acceptance, {n} drafted per step, % (N={n} | k={n})", spec[n][0][1], spec[n][1][1], False,
                     "{:.1f}"))
    rows.append(("acceptance, default setting, % (N=3 | adaptive)", l3[1], saad, False, "{:.1f}"))
    mm = find(r"### end make-model rc=0 (\d+) s", sl.get("make-model", ""))
    rows.append(("make-model pair (--fill blocks --sync=false), s", None, mm, True, "{:.0f}"))

    def show(v, fmt):
        return fmt.format(v) if v is not None else "n/a"

    print("| figure | llama.cpp | specd | ratio (ours / llama.cpp) |")
    print("| --- | ---: | ---: | ---: |")
    both, missing = 0, []
    for fig, lv, sv, lower, fmt in rows:
        ratio = "n/a"
        if lv and sv:
            both += 1
            ratio = f"{sv / lv:.2f}" + (" (lower is better)" if lower else "")
        print(f"| {fig} | {show(lv, fmt)} | {show(sv, fmt)} | {ratio} |")
        if lv is None and not fig.startswith("make-model"):
            missing.append(f"llama.cpp: {fig}")
        if sv is None:
            missing.append(f"specd: {fig}")
    for m in missing:
        print(f"peer_table: missing {m}", file=sys.stderr)
    return 0 if both else 1


if __name__ == "__main__":
    sys.exit(main())
