#!/bin/bash
# Issue 32's speed figures for per-channel K (chan4g64/rot4s0) in one command: decode attention
# time against q4_0 and rot4s0 side by side in one run (kvtier-bench attention, 16K and 32K,
# batch 1 and 8, 32 query / 8 KV heads, head_dim 128, 64-token blocks, medians), prefill
# (4K context, 512-query chunks) and chan quantize speed as a share of the memcpy probe
# (kvtier-bench kv-cache, f16 source; every tensor in the format).
# Usage: tools/bench_chan.sh [build dir (build/release)] [repeats (5)] [threads (2)]
set -euo pipefail
B=${1:-build/release}; R=${2:-5}; T=${3:-2}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
FM=q4_0,rot4s0,chan4g64/rot4s0,q8_0
echo "commit $(git rev-parse --short HEAD) $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$B/src/cli/kvtier-bench" attention --ctx 16384,32768 --batch 1,8 --modes decode --block-tokens 64 \
  --kv-type "$FM" --threads "$T" --repeats "$R" --json > "$W/attn.json"
"$B/src/cli/kvtier-bench" attention --prefill-ctx 4096 --modes prefill --block-tokens 64 \
  --kv-type "$FM" --threads "$T" --repeats "$R" --json > "$W/pre.json"
"${KV_BENCH:-$B/src/cli/kvtier-bench}" kv-cache --layers 2 --seq-len 512 --dtype f16 \
  --kv-type q4_0,rot4s0,chan4g64 --threads "$T" --repeats "$R" --json > "$W/kv.json"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$W" <<'PY'
import json, sys
w = sys.argv[1]
fm = ["q4_0", "rot4s0", "chan4g64/rot4s0", "q8_0"]
def name(r):
    return r["k_format"] if r["k_format"] == r["v_format"] else r["k_format"] + "/" + r["v_format"]
for f, title in (("attn", "decode"), ("pre", "prefill")):
    a = json.load(open(f"{w}/{f}.json"))
    ms = {}
    for r in a["rows"]:
        ms[(r["mode"], r["ctx"], r["batch"], name(r))] = r["ms"]
    print(f"{title} (ms, median of runs; target: chan4g64/rot4s0 <= 1.1x q4_0 and rot4s0), {a['config']['simd_target']}")
    print(f"| {title} | " + " | ".join(fm) + " | chan / q4_0 | chan / rot4s0 |")
    print("|---" * (len(fm) + 3) + "|")
    for key in sorted({k[:3] for k in ms}):
        v = [ms[key + (f,)] for f in fm]
        print(f"| {key[1] // 1024}K, batch {key[2]} | " + " | ".join(f"{x:.2f}" for x in v) +
              f" | {v[2] / v[0]:.2f}x | {v[2] / v[1]:.2f}x |")
    print()
k = json.load(open(f"{w}/kv.json"))
print(f"quantize (target >= 50% of memcpy); memcpy probe {k.get('memcpy_gbps', 0):.1f} GB/s")
print("| format | quantize ms | % of memcpy | dequantize ms |")
print("|---|---|---|---|")
for r in k["rows"]:
    pct = 100 * r["quantize_gbps"] / k["memcpy_gbps"] if k["memcpy_gbps"] else 0
    print(f"| {r['format']} | {r['quantize_ms']:.2f} | {pct:.0f}% | {r['dequantize_ms']:.2f} |")
PY
