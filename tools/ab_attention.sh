#!/usr/bin/env bash
# A/B of two kvtier-bench binaries on attention decode, side by side: alternates OLD and NEW
# for ROUNDS rounds and prints each row's median time and the new / old ratio.
# Usage: tools/ab_attention.sh OLD NEW [ROUNDS]  (e.g. build/old/src/cli/kvtier-bench
# build/release/src/cli/kvtier-bench 9). Environment: KV (formats, default
# q4_0,affine4g64,rot4s0), CTX (16384), BATCH (1,8), EXTRA (more flags, e.g. --head-dim 256).
set -euo pipefail
OLD=$(realpath "$1"); NEW=$(realpath "$2"); R=${3:-7}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
uptime
for i in $(seq 1 "$R"); do
  for w in old new; do
    b=$OLD; [ "$w" = new ] && b=$NEW
    # shellcheck disable=SC2086
    "$b" attention --ctx "${CTX:-16384}" --batch "${BATCH:-1,8}" --modes decode \
      --kv-type "${KV:-q4_0,affine4g64,rot4s0}" --threads 2 --repeats 5 ${EXTRA:-} --json \
      > "$T/$w.$i.json" 2>/dev/null
  done
done
uptime
python3 - "$T" "$R" <<'PY'
import json, statistics as st, sys
d, R = sys.argv[1], int(sys.argv[2])
res = {}
for w in ("old", "new"):
    for i in range(1, R + 1):
        for r in json.load(open(f"{d}/{w}.{i}.json"))["rows"]:
            key = (r["k_format"] + ("/" + r["v_format"] if r["v_format"] != r["k_format"] else ""), r["batch"])
            res.setdefault(key, {}).setdefault(w, []).append(r["ms"])
print(f"{'K/V':18} {'batch':>5} {'old ms':>8} {'new ms':>8} {'new/old':>8}  (medians of {R} alternating rounds)")
for (f, b), v in sorted(res.items()):
    o, n = st.median(v["old"]), st.median(v["new"])
    print(f"{f:18} {b:5} {o:8.3f} {n:8.3f} {n / o:8.3f}")
PY
