#!/bin/bash
# Issue 32's speed figures for the rotated formats in one command: decode attention time of
# rot4s0 / rot3s0 / rot2s0 against q4_0 side by side in one run (kvtier-bench attention, 16K and
# 32K, batch 1 and 8, 32 query / 8 KV heads, head_dim 128, medians), and quantize speed as a
# share of the memcpy probe (kvtier-bench kv-cache, f16 source).
# Usage: tools/bench_rot.sh [build dir (build/release)] [repeats (5)] [threads (2)]
set -euo pipefail
B=${1:-build/release}; R=${2:-5}; T=${3:-2}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
echo "commit $(git rev-parse --short HEAD) $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$B/src/cli/kvtier-bench" attention --ctx 16384,32768 --batch 1,8 --modes decode \
  --kv-type q4_0,rot4s0,rot3s0,rot2s0 --threads "$T" --repeats "$R" --json > "$W/attn.json"
"$B/src/cli/kvtier-bench" kv-cache --layers 2 --seq-len 512 --dtype f16 \
  --kv-type q4_0,rot4s0,rot3s0,rot2s0 --threads "$T" --repeats "$R" --json > "$W/kv.json"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
a = json.load(open(f"{w}/attn.json"))
ms = {}
for r in a["rows"]:
    ms[(r["ctx"], r["batch"], r["k_format"])] = r["ms"]
fm = ["q4_0", "rot4s0", "rot3s0", "rot2s0"]
print(f"decode (ms, median of runs; target: rot4 <= 1.1x q4_0, rot3 / rot2 <= 1.0x), {a['config']['simd_target']}")
print("| decode | " + " | ".join(fm) + " | rot4 / q4_0 | rot3 / q4_0 | rot2 / q4_0 |")
print("|---" * (len(fm) + 4) + "|")
for (ctx, b) in sorted({(k[0], k[1]) for k in ms}):
    v = [ms[(ctx, b, f)] for f in fm]
    print(f"| {ctx // 1024}K, batch {b} | " + " | ".join(f"{x:.2f}" for x in v) + " | " +
          " | ".join(f"{x / v[0]:.2f}x" for x in v[1:]) + " |")
k = json.load(open(f"{w}/kv.json"))
print(f"\nquantize (target >= 50% of memcpy); memcpy probe {k.get('memcpy_gbps', 0):.1f} GB/s")
print("| format | quantize ms | % of memcpy | dequantize ms |")
print("|---|---|---|---|")
for r in k["rows"]:
    pct = 100 * r["quantize_gbps"] / k["memcpy_gbps"] if k["memcpy_gbps"] else 0
    print(f"| {r['format']} | {r['quantize_ms']:.2f} | {pct:.0f}% | {r['dequantize_ms']:.2f} |")
PY
