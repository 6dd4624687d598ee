#!/usr/bin/env python3
"""Smoke test of `kvtier serve --device cuda` over its OpenAI API (src/cuda/serve_device_run.sh).

  serve_smoke.py GPU_URL TEXT_FILE [CPU_URL]
  serve_smoke.py fault GPU_URL TEXT_FILE    (a server started with KVTIER_CUDA_NAN_TOKEN=64,
      the '@' byte token of the bundled model: a request with '@' beside a clean one; the
      first must get a 500 naming the non-finite logits, the clean one and a later one 200)

1. A ~700-token prompt, greedy, 64 tokens, sent twice: the second is a prefix-cache hit
   (usage.prompt_tokens_details.cached_tokens > 0, the K/V uploaded from the host-RAM tier)
   and must give the cold request's text exactly.
2. With CPU_URL: the same request on a CPU server (informational: the GPU's text vs the CPU's).
3. 8 different prompts at once (one batched step per token on the GPU), then each again alone:
   the texts must be equal (each row of a batch as its sequence alone).
4. A chat completion; a bad request (max_tokens -1) must get a 4xx.
Exit 1 when 1, 3 or 4 fails.
"""
import json
import sys
import threading
import time
import urllib.error
import urllib.request


def post(url, path, body, timeout=300):
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.time()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read()), time.time() - t0
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}"), time.time() - t0


def completion(url, prompt, n=64):
    st, j, dt = post(url, "/v1/completions",
                     {"prompt": prompt, "max_tokens": n, "temperature": 0})
    if st != 200:
        return st, None, 0, dt, j
    u = j.get("usage", {})
    cached = u.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    return st, j["choices"][0]["text"], cached, dt, u


def fault(gpu, text):
    res = {}

    def go(name, prompt):
        res[name] = post(gpu, "/v1/completions",
                         {"prompt": prompt, "max_tokens": 32, "temperature": 0})

    # As token ids, so the '@' byte token 64 is in the prompt whatever the merges would do; the
    # last one, so the NaN is in the residual stream of the token whose logits are read.
    th = [threading.Thread(target=go, args=("poisoned", [32, 120, 509, 3705, 4677, 100, 64])),
          threading.Thread(target=go, args=("clean", "Fault run.\n" + text[600:1400]))]
    for t in th:
        t.start()
    for t in th:
        t.join()
    go("after", "After the fault.\n" + text[2000:2600])
    for k in ("poisoned", "clean", "after"):
        st, j, dt = res[k]
        print("5. %-8s HTTP %d %.3f s %s" % (k, st, dt, json.dumps(j)[:220]))
    ok = (res["poisoned"][0] == 500 and "non-finite" in json.dumps(res["poisoned"][1])
          and res["clean"][0] == 200 and res["after"][0] == 200)
    print("fault:", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


def main():
    if sys.argv[1] == "fault":
        return fault(sys.argv[2], open(sys.argv[3], encoding="utf-8", errors="replace").read())
    gpu, text_file = sys.argv[1], sys.argv[2]
    cpu = sys.argv[3] if len(sys.argv) > 3 else None
    text = open(text_file, encoding="utf-8", errors="replace").read()
    ok = True
    prompt = "Smoke run %d.\n" % int(time.time()) + text[:2800]
    st1, t1, c1, d1, u1 = completion(gpu, prompt)
    st2, t2, c2, d2, u2 = completion(gpu, prompt)
    same = st1 == 200 and st2 == 200 and t1 == t2
    print("1. cold: HTTP %d, %.3f s, usage %s" % (st1, d1, json.dumps(u1)))
    print("   hit:  HTTP %d, %.3f s, cached_tokens %d; text identical to cold: %s"
          % (st2, d2, c2, same))
    print("   text: %r" % (t1 or "")[:200])
    if not same or c2 <= 0:
        ok = False
        print("   FAIL: cold %r\n         hit  %r" % (t1, t2))
    if cpu:
        st3, t3, _, d3, _ = completion(cpu, prompt)
        print("2. cpu server: HTTP %d, %.3f s; GPU text identical to CPU text: %s"
              % (st3, d3, t3 == t1))
    prompts = ["Batch row %d of a smoke run at %d.\n" % (i, int(time.time()))
               + text[4000 + 997 * i: 4000 + 997 * i + 400 + 150 * i] for i in range(8)]
    res = [None] * 8

    def go(i):
        res[i] = completion(gpu, prompts[i], 48)

    th = [threading.Thread(target=go, args=(i,)) for i in range(8)]
    t0 = time.time()
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.time() - t0
    agree = 0
    for i in range(8):
        alone = completion(gpu, prompts[i], 48)
        if res[i][0] == 200 and alone[0] == 200 and res[i][1] == alone[1]:
            agree += 1
        else:
            print("   row %d differs: batch %r\n                  alone %r"
                  % (i, res[i][1], alone[1]))
    print("3. 8 prompts at once: %.3f s; each equal to the same prompt alone: %d of 8"
          % (wall, agree))
    ok = ok and agree == 8
    st, j, dt = post(gpu, "/v1/chat/completions",
                     {"messages": [{"role": "user", "content": "Tell me about Emma."}],
                      "max_tokens": 24, "temperature": 0})
    chat = j.get("choices", [{}])[0].get("message", {}).get("content") if st == 200 else j
    print("4. chat: HTTP %d, %.3f s: %r" % (st, dt, chat))
    bst, bj, _ = post(gpu, "/v1/completions", {"prompt": "x", "max_tokens": -1})
    print("   bad request (max_tokens -1): HTTP %d %s" % (bst, json.dumps(bj)[:160]))
    ok = ok and st == 200 and 400 <= bst < 500
    print("smoke:", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
