#!/usr/bin/env python3
"""Load client for `kvtier serve` (src/cuda/serve_device_run.sh): streamed /v1/completions.

  serve_load.py concurrency URL TEXT_FILE CLIENTS [REQUESTS_PER_CLIENT PROMPT_CHARS MAX_TOKENS]
      CLIENTS threads, each sending its requests in turn (distinct prompts cut from the text,
      greedy, ignore-eos not assumed: the completion token counts come from usage).
      Prints requests, errors, TTFT p50 / p90, completion tokens, wall seconds and the total
      completion tokens/s (tokens / (first start .. last end)), and the mean per-request decode
      tokens/s ((tokens - 1) / (end - first token)).
  serve_load.py ttft URL TEXT_FILE PROMPT_CHARS
      Round 1: a cold prompt of PROMPT_CHARS characters (max_tokens 8); round 2: the same prompt
      plus a short new turn (a prefix-cache hit). Prints each round's TTFT, prompt and cached
      tokens, and the ratio.
"""
import json
import sys
import threading
import time
import urllib.request


def stream(url, prompt, max_tokens):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.time()
    first = None
    usage = {}
    n_chunks = 0
    try:
        with urllib.request.urlopen(req, timeout=900) as r:
            for raw in r:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                j = json.loads(data)
                if j.get("usage"):
                    usage = j["usage"]
                ch = j.get("choices") or []
                if ch and ch[0].get("text"):
                    n_chunks += 1
                    if first is None:
                        first = time.time()
    except Exception as e:  # noqa: BLE001 (reported as an error)
        return {"ok": False, "error": str(e), "start": t0, "end": time.time()}
    end = time.time()
    toks = usage.get("completion_tokens", n_chunks)
    return {"ok": True, "start": t0, "end": end, "ttft": (first or end) - t0, "tokens": toks,
            "prompt_tokens": usage.get("prompt_tokens", 0),
            "cached": usage.get("prompt_tokens_details", {}).get("cached_tokens", 0),
            "decode_tps": (toks - 1) / (end - first) if first and toks > 1 and end > first else 0}


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] if v else 0


def concurrency(url, text, clients, per_client=2, chars=1000, max_tokens=128):
    res = []
    lock = threading.Lock()
    stamp = int(time.time() * 1000)

    def client(c):
        for k in range(per_client):
            off = (c * per_client + k) * 1500 % max(1, len(text) - chars)
            p = "Client %d request %d run %d.\n" % (c, k, stamp) + text[off:off + chars]
            r = stream(url, p, max_tokens)
            with lock:
                res.append(r)

    th = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    ok = [r for r in res if r["ok"]]
    if not ok:
        print("all %d requests failed: %s" % (len(res), res[0].get("error") if res else ""))
        return
    wall = max(r["end"] for r in ok) - min(r["start"] for r in ok)
    toks = sum(r["tokens"] for r in ok)
    print("clients %d: requests %d, errors %d, prompt tokens %d, completion tokens %d, wall %.2f s,"
          " TTFT p50 %.1f ms p90 %.1f ms, total %.0f tok/s, per request decode %.0f tok/s (mean)"
          % (clients, len(res), len(res) - len(ok), sum(r["prompt_tokens"] for r in ok), toks,
             wall, 1000 * pct([r["ttft"] for r in ok], 0.5),
             1000 * pct([r["ttft"] for r in ok], 0.9), toks / wall,
             sum(r["decode_tps"] for r in ok) / len(ok)))


def ttft(url, text, chars):
    stamp = "TTFT run %d.\n" % int(time.time() * 1000)
    reps = text
    while len(reps) < chars:
        reps += "\n" + text
    prompt = stamp + reps[:chars]
    r1 = stream(url, prompt, 8)
    r2 = stream(url, prompt + "\nAnd then, after all of that, what happened next?", 8)
    for name, r in (("round 1 (cold)", r1), ("round 2 (hit)", r2)):
        if not r["ok"]:
            print("%s: error %s" % (name, r["error"]))
            return
        print("%s: TTFT %.1f ms, prompt tokens %d, cached %d" % (name, 1000 * r["ttft"],
                                                                 r["prompt_tokens"], r["cached"]))
    print("TTFT cold / hit: %.1fx" % (r1["ttft"] / max(r2["ttft"], 1e-9)))


def main():
    mode, url, text_file = sys.argv[1], sys.argv[2], sys.argv[3]
    text = open(text_file, encoding="utf-8", errors="replace").read()
    if mode == "concurrency":
        a = [int(x) for x in sys.argv[4:]]
        concurrency(url, text, *a)
    else:
        ttft(url, text, int(sys.argv[4]))


if __name__ == "__main__":
    main()
