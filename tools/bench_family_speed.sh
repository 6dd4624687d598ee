#!/usr/bin/env bash
# Decode speed of the 2026 families against llama.cpp (issue 33), in one command: a
# random-weight GGUF of a real model's shape, decode tokens/s at each depth with q8_0 K/V and
# THREADS threads, kvtier (kvtier-bench model) then llama.cpp (llama-bench) in each round,
# REPEATS rounds, medians and their ratio.
#
#   tools/bench_family_speed.sh [build dir (build/release)] [llama bin dir (/work/llama/build/bin)]
#
# Env: ARCH qwen35 (default: Qwen3.5-0.8B's shape, all 24 layers: 18 Gated DeltaNet + 6 gated
# full attention, hidden 1024, 8 q / 2 KV heads of 256, FFN 3584, DeltaNet 16 q/k + 16 v heads
# of 128, vocab 248320) or gemma3 (Gemma-3-1B's, as tools/bench_window.sh);
# DEPTHS ("4096 32768"), REPEATS (3), DECODE (32), THREADS (2), MODEL (made when missing),
# OUT (results dir, default /tmp/kvtier_bench_family_$ARCH).
# llama-bench prefills each depth for real before its decode (minutes at 32K); kvtier fills
# its cache with random K/V (a hybrid model's recurrent state starts at zero), which costs
# the decode the same work.
set -euo pipefail
BUILD=${1:-build/release}
LLAMA=${2:-/work/llama/build/bin}
ARCH=${ARCH:-qwen35}
DEPTHS=${DEPTHS:-"4096 32768"}
REPEATS=${REPEATS:-3}
DECODE=${DECODE:-32}
THREADS=${THREADS:-2}
OUT=${OUT:-/tmp/kvtier_bench_family_$ARCH}
mkdir -p "$OUT"
KV="$BUILD/src/cli/kvtier"
KVB="$BUILD/src/cli/kvtier-bench"
case "$ARCH" in
  qwen35)
    MODEL=${MODEL:-$OUT/qwen35-0.8b-shape-q8_0.gguf}
    SHAPE=(--arch qwen35 --hidden 1024 --layers 24 --heads 8 --kv-heads 2 --head-dim 256
           --ffn 3584 --vocab 248320 --ctx 40960 --ssm-state 128 --ssm-k-heads 16
           --ssm-v-heads 16 --weight-std 0.05 --rope-theta 10000000) ;;
  gemma3)
    MODEL=${MODEL:-$OUT/gemma3-1b-shape-q8_0.gguf}
    SHAPE=(--arch gemma3 --hidden 1152 --layers 26 --heads 4 --kv-heads 1 --head-dim 256
           --ffn 6912 --vocab 262144 --ctx 40960 --rope-theta 1000000 --window 512
           --swa-period 6) ;;
  *) echo "bench_family_speed.sh: ARCH must be qwen35 or gemma3, got '$ARCH'" >&2; exit 2 ;;
esac
if [ ! -f "$MODEL" ]; then
  "$KV" make-test-model --out "$MODEL" "${SHAPE[@]}" --weight-type q8_0 --seed 1 >/dev/null
fi
echo "# $(date -u +%FT%TZ) $ARCH commit $(git rev-parse --short HEAD) $(nproc) cpus," \
     "threads $THREADS; uptime:$(uptime)"
for r in $(seq "$REPEATS"); do
  for d in $DEPTHS; do
    "$KVB" model --model "$MODEL" --depth "$d" --kv-type q8_0 --prefill 1 \
      --decode "$DECODE" --threads "$THREADS" --json > "$OUT/kvtier_${d}_$r.json"
    "$LLAMA/llama-bench" -m "$MODEL" -p 0 -n "$DECODE" -d "$d" -ctk q8_0 -ctv q8_0 -fa 1 \
      -t "$THREADS" -r 1 -o json > "$OUT/llama_${d}_$r.json" 2> "$OUT/llama_${d}_$r.err"
    echo "# round $r depth $d done $(date -u +%T); load:$(uptime | sed 's/.*average://')" >&2
  done
done
python3 - "$OUT" "$DEPTHS" "$REPEATS" "$ARCH" <<'PY'
import json, statistics, sys
out, depths, reps, arch = sys.argv[1], sys.argv[2].split(), int(sys.argv[3]), sys.argv[4]
print(f"| {arch} depth | kvtier decode tok/s (rounds) | llama.cpp decode tok/s (rounds) | median ratio |")
print("|---|---|---|---|")
for d in depths:
    kv, ll = [], []
    for r in range(1, reps + 1):
        kv.append(json.load(open(f"{out}/kvtier_{d}_{r}.json"))["rows"][0]["decode_tok_s"])
        l = json.load(open(f"{out}/llama_{d}_{r}.json"))
        ll.append([t for t in l if t["n_gen"] > 0][0]["avg_ts"])
    k, L = statistics.median(kv), statistics.median(ll)
    f = lambda xs: " / ".join(f"{x:.2f}" for x in xs)
    print(f"| {d} | {k:.2f} ({f(kv)}) | {L:.2f} ({f(ll)}) | **{k / L:.2f}x** |")
PY
