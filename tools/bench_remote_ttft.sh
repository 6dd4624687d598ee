#!/usr/bin/env bash
# TTFT of a long prompt from the remote tier against cold prefill: one redis-server (loopback,
# persistence off), replica A computes each prompt cold, replica B (its own RAM, the same Redis)
# is served it from Redis. TTFTs are the servers' own log lines (ttft_ms).
#   tools/bench_remote_ttft.sh BUILD_DIR [WORDS] [RUNS]
set -euo pipefail
build=${1:?usage: tools/bench_remote_ttft.sh BUILD_DIR [WORDS] [RUNS]}
words=${2:-12000}
runs=${3:-3}
kvtier="$build/src/cli/kvtier"
here=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d /tmp/kvtier_bench_ttft_XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save "" --appendonly no \
  --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  kill "$(cat "$dir/redis.pid")" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
for r in a b; do
  "$kvtier" serve --port 0 --remote-cache "redis://127.0.0.1:$port" --max-model-len 20480 \
    --max-num-seqs 2 > "$dir/$r.out" 2> "$dir/$r.log" &
  pids+=($!)
done
for r in a b; do
  for _ in $(seq 300); do grep -q listening "$dir/$r.out" 2>/dev/null && break; sleep 0.1; done
done
pa=$(sed -n 's/.*127.0.0.1:\([0-9]*\) .*/\1/p' "$dir/a.out")
pb=$(sed -n 's/.*127.0.0.1:\([0-9]*\) .*/\1/p' "$dir/b.out")
python3 - "$pa" "$pb" "$words" "$runs" "$here/data/corpus/eval.txt" "$dir" <<'PY'
import json, re, statistics, sys, time, urllib.request
pa, pb, words, runs, corpus, d = sys.argv[1:7]
text = " ".join(open(corpus, encoding="utf-8").read().split()[: int(words)])
def complete(port, prompt):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
        data=json.dumps({"prompt": prompt, "max_tokens": 8, "temperature": 0}).encode(),
        headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=1800).read())
def queued(port):
    m = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    return float(re.search(r"\nkvtier_remote_queued_blocks ([0-9.e+]+)", m).group(1))
def last_ttft(log):
    return float(re.findall(r"ttft_ms=([0-9.]+)", open(log).read())[-1])
cold, warm = [], []
for r in range(int(runs)):
    prompt = f"Run {r}. " + text
    a = complete(pa, prompt); ta = last_ttft(f"{d}/a.log")
    while queued(pa) > 0: time.sleep(0.1)  # A's write-through reaches Redis behind the request
    time.sleep(0.5)
    b = complete(pb, prompt); tb = last_ttft(f"{d}/b.log")
    same = a["choices"][0]["text"] == b["choices"][0]["text"]
    print(f"run {r}: prompt {a['usage']['prompt_tokens']} tokens; cold TTFT {ta:.0f} ms; "
          f"remote TTFT {tb:.0f} ms (cached {b['usage']['prompt_tokens_details']['cached_tokens']}); "
          f"same output {same}; ratio {ta / tb:.1f}x", flush=True)
    cold.append(ta); warm.append(tb)
print(f"median cold {statistics.median(cold):.0f} ms, remote {statistics.median(warm):.0f} ms, "
      f"ratio {statistics.median(cold) / statistics.median(warm):.1f}x")
PY
