#!/bin/bash
# Issue 33 e2e (docs/remote-tier.md, "State snapshots"): two kvtier serve replicas sharing one
# redis-server (port 26399; replicas on 28411 / 28412), the tiny trained qwen35 model.
#   tools/e2e_remote_state.sh [BUILD_DIR] [MODEL] [TEXT]
# A computes a prompt cold; B (fresh process, own empty RAM) must hit through Redis with the
# same greedy text, resuming from the remote state snapshot.
set -u
B=${1:-build/release}/src/cli/kvtier
M=${2:-/work/scratch_train/kvtier-tiny-qwen35.gguf}
TEXT=${3:-data/corpus/eval.txt}
d=$(mktemp -d /tmp/kvtier_e2e_XXXXXX)
redis-server --port 26399 --save "" --appendonly no --dir "$d" > "$d/redis.log" 2>&1 &
rp=$!
sleep 1
for r in a b; do
  p=$([ $r = a ] && echo 28411 || echo 28412)
  $B serve --model "$M" --port $p --threads 1 --max-num-seqs 2 --max-model-len 512 \
     --remote-cache redis://127.0.0.1:26399 > "$d/$r.log" 2>&1 &
  eval "pid_$r=$!"
done
for p in 28411 28412; do
  for i in $(seq 100); do curl -sf http://127.0.0.1:$p/health > /dev/null && break; sleep 0.3; done
done
prompt=$(head -c 1500 "$TEXT" | tail -c 1000 | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read()))')
body="{\"model\":\"kvtier-tiny-qwen35\",\"prompt\":$prompt,\"max_tokens\":32,\"temperature\":0}"
ra=$(curl -s http://127.0.0.1:28411/v1/completions -H 'Content-Type: application/json' -d "$body")
sleep 1
rb=$(curl -s http://127.0.0.1:28412/v1/completions -H 'Content-Type: application/json' -d "$body")
python3 - "$ra" "$rb" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
ta, tb = a["choices"][0]["text"], b["choices"][0]["text"]
print("A usage:", a.get("usage")); print("B usage:", b.get("usage"))
print("same text:", ta == tb); print("text:", repr(ta[:120]))
PY
curl -s http://127.0.0.1:28412/metrics | grep -E "kvtier_remote_state_(hits|lookups)_total|kvtier_remote_hits_total|kvtier_remote_state_misses_total" 
curl -s http://127.0.0.1:28411/metrics | grep -E "kvtier_remote_state_written_total"
grep -h "cache_fetch" "$d/b.log" | head -3
kill $pid_a $pid_b; wait $pid_a $pid_b 2>/dev/null
kill $rp; wait $rp 2>/dev/null
rm -rf "$d"
