#!/usr/bin/env python3
# Usage: tools/anthropic_cache_probe.py path/to/kvtier [REPEATS]  (starts `kvtier serve` on the
# bundled model; docs/results/anthropic.md has its figures)
# Cold vs warm /v1/messages on a repeated long system prompt: usage and time to first text delta.
import json, subprocess, sys, time, re, http.client, statistics
bin_ = sys.argv[1]
p = subprocess.Popen([bin_, "serve", "--port", "0", "--host", "127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
port = None
for line in p.stdout:
    m = re.match(r"kvtier serve: listening on http://127\.0\.0\.1:(\d+)", line)
    if m: port = int(m.group(1)); break
words = ("It is a truth universally acknowledged that a single man in possession of a good fortune "
         "must be in want of a wife however little known the feelings or views of such a man may be").split()
def system(tag):
    return tag + " " + " ".join(words[i % len(words)] for i in range(900))
def turn(sys_text, q):
    body = {"model": "m", "max_tokens": 8, "temperature": 0, "stream": True, "system": sys_text,
            "messages": [{"role": "user", "content": q}]}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    t0 = time.perf_counter()
    c.request("POST", "/v1/messages", json.dumps(body), {"content-type": "application/json"})
    r = c.getresponse()
    ttft = None; usage = None; buf = b""
    while True:
        chunk = r.read1(65536)
        if not chunk: break
        buf += chunk
        if ttft is None and b"content_block_delta" in buf: ttft = time.perf_counter() - t0
    for ev in buf.decode().split("\n\n"):
        if ev.startswith("event: message_start"):
            usage = json.loads(ev.split("data: ", 1)[1])["message"]["usage"]
    return ttft, usage
rows = []
for rep in range(int(sys.argv[2]) if len(sys.argv) > 2 else 3):
    s = system(f"Assistant number {rep}.")
    cold = turn(s, "Who is Mr. Darcy?")
    warm = turn(s, "Who is Mr. Bingley?")
    rows.append((cold, warm))
    print(f"rep {rep}: cold ttft {cold[0]*1000:.0f} ms usage {cold[1]}; warm ttft {warm[0]*1000:.0f} ms usage {warm[1]}", flush=True)
cr = [w[0] / c[0] for c, w in rows]
print(f"median cold/warm ttft ratio: {statistics.median([1/x for x in cr]):.1f}x")
p.terminate(); p.wait()
