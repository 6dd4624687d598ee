#!/usr/bin/env bash
# Sliding-window KV (issue 33): a Gemma-3-1B-shaped random-weight GGUF (26 layers, 4 heads,
# 1 KV head, head_dim 256, hidden 1152, ffn 6912, vocab 262144, window 512, every 6th layer
# global, q8_0 weights), decode tokens/s at 4K and 32K with q8_0 KV and 2 threads, kvtier
# (kvtier-bench model) and llama.cpp (llama-bench) side by side, and kvtier's active KV bytes
# against global layers x context + window layers x window rows.
#
#   tools/bench_window.sh [build dir (build/release)] [llama bin dir (/work/llama/build/bin)]
#
# Env: DEPTHS (default "4096 32768"), REPEATS (3: runs of each side, the median is kept),
# DECODE (32 decode steps), MODEL (the GGUF; made when missing), OUT (results dir).
set -euo pipefail
BUILD=${1:-build/release}
LLAMA=${2:-/work/llama/build/bin}
DEPTHS=${DEPTHS:-"4096 32768"}
REPEATS=${REPEATS:-3}
DECODE=${DECODE:-32}
OUT=${OUT:-/tmp/kvtier_bench_window}
MODEL=${MODEL:-$OUT/gemma3-1b-shape-q8_0.gguf}
mkdir -p "$OUT"
KV="$BUILD/src/cli/kvtier"
KVB="$BUILD/src/cli/kvtier-bench"
if [ ! -f "$MODEL" ]; then
  "$KV" make-test-model --out "$MODEL" --arch gemma3 --hidden 1152 --layers 26 --heads 4 \
    --kv-heads 1 --head-dim 256 --ffn 6912 --vocab 262144 --ctx 32768 --rope-theta 1000000 \
    --window 512 --swa-period 6 --weight-type q8_0 --seed 1
fi
echo "# $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD) $(nproc) cpus; uptime:$(uptime)"
for d in $DEPTHS; do
  for r in $(seq "$REPEATS"); do
    "$KVB" model --model "$MODEL" --depth "$d" --kv-type q8_0 --prefill 32 \
      --decode "$DECODE" --threads 2 --json > "$OUT/kvtier_${d}_$r.json"
    "$LLAMA/llama-bench" -m "$MODEL" -p 0 -n "$DECODE" -d "$d" -ctk q8_0 -ctv q8_0 -fa 1 \
      -t 2 -r 1 -o json > "$OUT/llama_${d}_$r.json" 2> "$OUT/llama_${d}_$r.err"
  done
done
python3 - "$OUT" "$DEPTHS" "$REPEATS" <<'PY'
import json, statistics, sys
out, depths, reps = sys.argv[1], sys.argv[2].split(), int(sys.argv[3])
# Gemma-3-1B shape: 26 layers, l % 6 == 5 global -> 4 global, 22 window; window 512.
n_global, n_window, window = 4, 22, 512
row_bytes = 2 * 272  # q8_0 K + V of one token, one layer, 1 KV head of 256 dims
print("| depth | kvtier decode tok/s | llama.cpp decode tok/s | ratio | kvtier KV bytes | target bytes | KV / target |")
print("|---|---|---|---|---|---|---|")
for d in depths:
    kv, ll, kb = [], [], []
    for r in range(1, reps + 1):
        j = json.load(open(f"{out}/kvtier_{d}_{r}.json"))
        row = j["rows"][0]
        kv.append(row["decode_tok_s"]); kb.append(row["kv_bytes"])
        l = json.load(open(f"{out}/llama_{d}_{r}.json"))
        ll.append([t for t in l if t["n_gen"] > 0][0]["avg_ts"])
    ctx = int(d) + 32  # the bytes are read after the 32-token prefill chunk
    target = (n_global * ctx + n_window * window) * row_bytes
    k, L = statistics.median(kv), statistics.median(ll)
    print(f"| {d} | {k:.2f} | {L:.2f} | {k / L:.2f}x | {kb[-1]:,} | {target:,} | {kb[-1] / target:.3f} |")
PY
