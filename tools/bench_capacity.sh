#!/bin/bash
# Histories per GiB of RAM and SSD (issue 32): kvtier-bench serve's batched-histories workload
# against a kvtier serve with an SSD tier (write-through, so every stored block reaches SSD),
# once with serve's defaults (q8_0 active, rot4s0 stored) and once with f16 everywhere.
# Reads the prefix cache's bytes per tier from the run's kv_bytes (/metrics).
# Usage: tools/bench_capacity.sh [build dir (build/release)] [batch (8)] [history tokens (1024)]
set -euo pipefail
B=${1:-build/release}; N=${2:-8}; T=${3:-1024}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
run() {  # name, serve flags...
  local name=$1; shift
  "$B/src/cli/kvtier-bench" serve --workload batched-histories --batch "$N" --history-tokens "$T" \
    --max-tokens 8 --json -- --ssd-cache-dir "$W/ssd_$name" --cache-write-policy write-through "$@" \
    > "$W/$name.json" 2> "$W/$name.err" || { cat "$W/$name.err" >&2; exit 1; }
}
run defaults
run f16 --kv-type f16 --kv-store-type active
python3 - "$W" "$N" "$T" <<'PY'
import json, sys
w, n, t = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = {k: json.load(open(f"{w}/{k}.json")) for k in ("defaults", "f16")}
print(f"batched-histories: {n} histories of {t} tokens (+ turn); bytes per tier from /metrics")
print("| configuration | active formats | RAM bytes | SSD bytes | histories / GiB RAM | histories / GiB SSD |")
print("|---|---|---|---|---|---|")
per = {}
for k, j in rows.items():
    tot = j["kv_bytes_total"]
    fm = ", ".join(f"{tier} {'/'.join(j['kv_bytes'][tier])}" for tier in ("active", "ram", "ssd"))
    ram, ssd = tot.get("ram", 0), tot.get("ssd", 0)
    per[k] = (n * 2**30 / ram if ram else 0, n * 2**30 / ssd if ssd else 0)
    print(f"| {k} | {fm} | {ram:,.0f} | {ssd:,.0f} | {per[k][0]:,.0f} | {per[k][1]:,.0f} |")
d, f = per["defaults"], per["f16"]
print(f"defaults / f16: RAM {d[0] / f[0]:.2f}x, SSD {d[1] / f[1]:.2f}x")
PY
