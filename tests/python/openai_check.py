#!/usr/bin/env python3
"""The official openai client against specd's HTTP API.

    openai_check.py BASE_URL CASES.json [API_KEY]

CASES.json is a list of {"name", "chat", "request": {...}, "extra_body": {...},
"token_ids": [...], "text": "..."}: the request as the openai client sends it
(extra_body: specd's extensions) and the tokens and text the gRPC API
produced for the same request and seed. Each case runs
twice, non-streamed and streamed (with usage); both must give exactly those
tokens and that text, a finish reason, usage and specd's figures. Prints one
line per case and "N passed, 0 failed" at the end; exits 1 on any mismatch.
"""
import json
import sys

import openai


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def extra(obj, key):
    value = getattr(obj, key, None)
    if value is None and getattr(obj, "model_extra", None):
        value = obj.model_extra.get(key)
    return value


def main():
    base_url, cases_path = sys.argv[1], sys.argv[2]
    api_key = sys.argv[3] if len(sys.argv) > 3 else "unused"
    client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=300, max_retries=0)
    cases = json.load(open(cases_path))
    models = client.models.list()
    if not models.data or not models.data[0].id:
        fail("GET /v1/models listed no model")
    model = models.data[0].id
    passed = 0
    for case in cases:
        req = dict(case["request"])
        req["model"] = model
        want_ids, want_text = case["token_ids"], case["text"]
        api = client.chat.completions if case["chat"] else client.completions
        body = {"return_token_ids": True, **case.get("extra_body", {})}

        # Non-streamed.
        r = api.create(**req, extra_body=body)
        c = r.choices[0]
        text = c.message.content if case["chat"] else c.text
        ids = extra(c, "token_ids")
        if ids != want_ids or text != want_text:
            fail(f"{case['name']} (non-stream): got {ids} {text!r}, gRPC gave {want_ids} {want_text!r}")
        if c.finish_reason not in ("stop", "length"):
            fail(f"{case['name']}: finish_reason {c.finish_reason!r}")
        if r.usage.completion_tokens != len(want_ids) or r.usage.total_tokens != r.usage.prompt_tokens + len(want_ids):
            fail(f"{case['name']}: usage {r.usage}")
        figures = extra(r, "specd")
        if not figures or "acceptance_rate" not in figures or "mean_accepted_length" not in figures:
            fail(f"{case['name']}: no specd figures in {r}")
        if "logprobs" in req:
            lp = c.logprobs
            n = len(lp.content) if case["chat"] else len(lp.token_logprobs)
            if n != len(want_ids):
                fail(f"{case['name']}: {n} logprobs for {len(want_ids)} tokens")

        # Streamed, with the usage chunk.
        stream = api.create(**req, stream=True, stream_options={"include_usage": True}, extra_body=body)
        text, ids, finish, usage = "", [], None, None
        for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for ch in chunk.choices:
                piece = ch.delta.content if case["chat"] else ch.text
                text += piece or ""
                ids += extra(ch, "token_ids") or []
                if ch.finish_reason:
                    finish = ch.finish_reason
        if ids != want_ids or text != want_text:
            fail(f"{case['name']} (stream): got {ids} {text!r}, gRPC gave {want_ids} {want_text!r}")
        if finish != c.finish_reason:
            fail(f"{case['name']} (stream): finish {finish!r}, non-stream {c.finish_reason!r}")
        if usage is None or usage.completion_tokens != len(want_ids):
            fail(f"{case['name']} (stream): usage {usage}")
        print(f"ok {case['name']}: {len(want_ids)} tokens, finish {finish}")
        passed += 2

    # Errors come back as the client's typed exceptions.
    try:
        client.completions.create(model=model, prompt="x", n=2)
        fail("n=2 was accepted")
    except openai.BadRequestError as e:
        if e.status_code != 400:
            fail(f"n=2: status {e.status_code}")
    passed += 1
    print(f"{passed} passed, 0 failed")


if __name__ == "__main__":
    main()
