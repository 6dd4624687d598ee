#!/bin/bash
# Issue 32's speed figures for the rotated formats in one command: decode attention time of
# rot4s0 / rot3s0 / rot2s0 against q4_0 side by side in one run (kvtier-bench attention, 16K and
# 32K, batch 1 and 8, 32 query / 8 KV heads, head_dim 128, medians), and quantize speed as a
# share of the memcpy probe (kvtier-bench kv-cache, f16 source): --seq-len 512 (the section's
# usual figure: 4 MiB tensors, cache-resident) and --seq-len 4096 (32 MiB tensors, DRAM-sized).
# With a second build directory (e.g. one of the commit before a change), each measurement is
# taken with it right after the first build's (same run, interleaved) and printed beside it.
# Usage: tools/bench_rot.sh [build dir (build/release)] [repeats (5)] [threads (2)] [baseline build dir]
set -euo pipefail
B=${1:-build/release}; R=${2:-5}; T=${3:-2}; BASE=${4:-}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
echo "commit $(git rev-parse --short HEAD) $(date -u +%FT%TZ) load: $(cut -d' ' -f1-3 /proc/loadavg)"
attn() {  # build dir, tag
  "$1/src/cli/kvtier-bench" attention --ctx 16384,32768 --batch 1,8 --modes decode \
    --kv-type q4_0,rot4s0,rot3s0,rot2s0 --threads "$T" --repeats "$R" --json > "$W/attn_$2.json"
}
kv() {  # build dir, tag, seq-len
  "$1/src/cli/kvtier-bench" kv-cache --layers 2 --seq-len "$3" --dtype f16 \
    --kv-type q4_0,rot4s0,rot3s0,rot2s0 --threads "$T" --repeats "$R" --json > "$W/kv${3}_$2.json"
}
attn "$B" new; if [ -n "$BASE" ]; then attn "$BASE" base; fi
for L in 512 4096; do
  kv "$B" new "$L"; if [ -n "$BASE" ]; then kv "$BASE" base "$L"; fi
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$W" "$B" "$BASE" <<'PY'
import json, os, sys
w, b, base = sys.argv[1], sys.argv[2], sys.argv[3]
tags = [("new", b)] + ([("base", base)] if base else [])
fm = ["q4_0", "rot4s0", "rot3s0", "rot2s0"]
for tag, d in tags:
    a = json.load(open(f"{w}/attn_{tag}.json"))
    ms = {(r["ctx"], r["batch"], r["k_format"]): r["ms"] for r in a["rows"]}
    print(f"\n[{d}] decode (ms, median; target: rot4 <= 1.1x q4_0, rot3 / rot2 <= 1.0x), {a['config']['simd_target']}")
    print("| decode | " + " | ".join(fm) + " | rot4 / q4_0 | rot3 / q4_0 | rot2 / q4_0 |")
    print("|---" * (len(fm) + 4) + "|")
    for (ctx, bt) in sorted({(k[0], k[1]) for k in ms}):
        v = [ms[(ctx, bt, f)] for f in fm]
        print(f"| {ctx // 1024}K, batch {bt} | " + " | ".join(f"{x:.2f}" for x in v) + " | " +
              " | ".join(f"{x / v[0]:.2f}x" for x in v[1:]) + " |")
for L in (512, 4096):
    print(f"\nquantize, --seq-len {L} (target >= 50% of memcpy)")
    print("| format | " + " | ".join(f"[{d}] ms | [{d}] % of memcpy" for _, d in tags) + " |")
    print("|---" * (1 + 2 * len(tags)) + "|")
    ks = {tag: json.load(open(f"{w}/kv{L}_{tag}.json")) for tag, _ in tags}
    for f in fm:
        cells = []
        for tag, _ in tags:
            k = ks[tag]
            r = next(x for x in k["rows"] if x["format"] == f)
            pct = 100 * r["quantize_gbps"] / k["memcpy_gbps"] if k["memcpy_gbps"] else 0
            cells += [f"{r['quantize_ms']:.2f}", f"{pct:.0f}%"]
        print(f"| {f} | " + " | ".join(cells) + " |")
    print("memcpy probe: " + ", ".join(f"[{d}] {ks[t]['memcpy_gbps']:.1f} GB/s" for t, d in tags))
PY
