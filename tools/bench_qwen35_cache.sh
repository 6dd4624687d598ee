#!/usr/bin/env bash
# Issue 33's measurements on a Qwen3.5-shaped random-weight file, in one command:
#   1. bytes per cached prefix per tier (K/V rows of the attention layers + state snapshots),
#      read from `kvtier serve`'s cache log lines and the SSD tier's files;
#   2. seed 004's two-round test (round-2 TTFT vs cold) for kvtier and, when it runs the
#      file, llama-server (which re-prefills a hybrid model's prompt).
# Shape: Qwen3.5-0.8B's layers (hidden 1024, 8 q / 2 kv heads of 256, FFN 3584, DeltaNet
# 16 q/k + 16 v heads of 128, conv 4, a full-attention layer every 4th), LAYERS of its 24
# (default 8: 2 attention + 6 DeltaNet, to keep a cold prefill of CONTEXT tokens within
# minutes on 2 threads), VOCAB tokens (default 32000), q8_0 weights, KV type KV (q8_0).
# Needs the kvtier and kvtier-bench targets built.
# Usage: tools/bench_qwen35_cache.sh [build dir]
#   env: LAYERS VOCAB CONTEXT KV THREADS; RUNS=n two-round runs (default 1), each on a fresh
#   server and SSD tier, then the median / min / max round-2 speedup; BASE=path/to/kvtier: a
#   second kvtier binary (e.g. an older build) run alternately with this one, side by side;
#   KEEP=1 keeps the work folder; LOG=path appends the servers' logs (cache_fetch /
#   cache_store / ttft lines: where each TTFT went) there too; NO_LLAMA=1 skips llama-server.
set -euo pipefail
BUILD=${1:-build/release}
K="$BUILD/src/cli/kvtier"
KB="$BUILD/src/cli/kvtier-bench"
LLAMA=${LLAMA:-/work/llama/build/bin}
LAYERS=${LAYERS:-8} VOCAB=${VOCAB:-32000} CONTEXT=${CONTEXT:-1024} KV=${KV:-q8_0}
THREADS=${THREADS:-2}
W=$(mktemp -d /tmp/kvtier_q35_XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$W"' EXIT
M="$W/qwen35-0.8b-shape.gguf"
"$K" make-test-model --arch qwen35 --out "$M" --hidden 1024 --layers "$LAYERS" --heads 8 \
  --kv-heads 2 --head-dim 256 --ffn 3584 --vocab "$VOCAB" --ctx 8192 --ssm-state 128 \
  --ssm-k-heads 16 --ssm-v-heads 16 --weight-type q8_0 --weight-std 0.05 --text-fillers \
  --rope-theta 10000000 --seed 35 >/dev/null
echo "== $(date -u +%F\ %T) commit $(git rev-parse --short HEAD) $(uptime | sed 's/.*load/load/')"
echo "== model: $M (layers $LAYERS, vocab $VOCAB), KV $KV, context $CONTEXT, threads $THREADS"

RUNS=${RUNS:-1}
# One two-round run: $1 label, $2 the kvtier binary serving, $3 run number.
two_round() {
  rm -rf "$W/ssd"
  "$KB" serve --model "$M" --json --workload two-round --context-tokens "$CONTEXT" \
    --max-tokens 16 --turn-tokens 32 --server-bin "$2" --server-log "$W/serve.$1.$3.log" \
    -- --threads "$THREADS" --kv-cache-dtype "$KV" --cache-memory-mb 2048 \
    --ssd-cache-dir "$W/ssd" --cache-write-policy write-through >"$W/$1.$3.json"
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); r=j["rounds"]
print("%s run %s: cold %.1f ms, round 2 %.1f ms (%d of %d tokens cached): %.2fx" % (sys.argv[2],
  sys.argv[3], r[0]["ttft_ms"], r[1]["ttft_ms"], r[1]["cached_tokens"], r[1]["prompt_tokens"],
  j["round2_ttft_speedup"]))' "$W/$1.$3.json" "$1" "$3"
  # Where each TTFT went (this build's servers log a ttft line per request).
  grep -hE ' ttft id=' "$W/serve.$1.$3.log" | sed 's/^/    /' || true
  [ -z "${LOG:-}" ] || cat "$W/serve.$1.$3.log" >>"$LOG"
}
echo "== kvtier: two-round, RAM + SSD tiers, $RUNS run(s)${BASE:+, alternating with BASE=$BASE}"
for i in $(seq 1 "$RUNS"); do
  two_round kvtier "$K" "$i"
  [ -z "${BASE:-}" ] || two_round base "$BASE" "$i"
done
python3 - "$W" "$RUNS" <<'PY'
import json, statistics, sys
w, runs = sys.argv[1], int(sys.argv[2])
for label in ("kvtier", "base"):
    try:
        js = [json.load(open("%s/%s.%d.json" % (w, label, i))) for i in range(1, runs + 1)]
    except FileNotFoundError:
        continue
    sp = [j["round2_ttft_speedup"] for j in js]
    cold = [j["rounds"][0]["ttft_ms"] for j in js]
    warm = [j["rounds"][1]["ttft_ms"] for j in js]
    print("== %s: round-2 speedup median %.2fx (min %.2f, max %.2f) over %d runs; cold median "
          "%.1f ms (%.1f-%.1f), round 2 median %.1f ms (%.1f-%.1f)" % (label,
          statistics.median(sp), min(sp), max(sp), runs, statistics.median(cold), min(cold),
          max(cold), statistics.median(warm), min(warm), max(warm)))
PY
cp "$W/kvtier.$RUNS.json" "$W/kvtier.json"
echo "== the last run's JSON"
cat "$W/kvtier.json"; echo
# K/V bytes per tier are the JSON's kv_bytes (/metrics); a snapshot is a state file below
# (in RAM: its size less the 48-byte file header).
echo "== SSD tier files (write-through: every stored entry and snapshot)"
find "$W/ssd" -name '*.kvst' -printf '%s state %p\n' 2>/dev/null | sort -n | tail -n 4 || true
find "$W/ssd" -name '*.kvs' -printf '%s segment %p\n' 2>/dev/null | tail -n 4 || true

echo "== llama-server on the same file (re-prefills a hybrid model's prompt)"
if [ -z "${NO_LLAMA:-}" ] && [ -x "$LLAMA/llama-server" ]; then
  "$LLAMA/llama-server" -m "$M" -t "$THREADS" -tb "$THREADS" --host 127.0.0.1 --port 18093 \
    -c $((CONTEXT * 2 + 512)) -np 1 -ctk "$KV" -ctv "$KV" -fa on >"$W/llama.log" 2>&1 &
  LP=$!
  for _ in $(seq 1 120); do
    curl -sf http://127.0.0.1:18093/health >/dev/null 2>&1 && break
    sleep 1
  done
  "$KB" serve --url http://127.0.0.1:18093 --server-pid "$LP" --json --workload two-round \
    --context-tokens "$CONTEXT" --max-tokens 16 --turn-tokens 32 | tee "$W/llama.json" || \
    tail -n 20 "$W/llama.log"
  kill "$LP" 2>/dev/null || true
fi
