#!/bin/bash
# Matmul decode against the memory-bandwidth floor (issue 30), every weight type at two
# shapes: 1024x3072 (shape 1, read from L3: the floor is a cache read) and the 1024x151936
# lm head (shape 3, read from DRAM). One thread (KVTIER_BENCH_THREADS=1), so x_floor_cpu (the
# matmul's thread CPU time over a plain read of the same bytes in the same iteration) is the
# figure: time slices lost to other processes do not enter it. One kvtier-bench process per
# type (each well under 10 minutes), medians of REPS repetitions.
#   usage: tools/bench_floors.sh [REPS] [TYPE ...]      (types by ggml name; default: all 15)
#   env:   KVTIER_BENCH (kvtier-bench binary; default build/release/src/cli/kvtier-bench),
#          BASE (a second kvtier-bench, e.g. an older build: run alternately with the first,
#          type by type, and shown beside it: same load, side by side), SHAPES ("1 3")
# Prints one table: type, shape, ns (wall median), floor ns (ns / x_floor), x_floor (wall),
# x_floor_cpu (and BASE's x_floor_cpu with the ratio when BASE is set).
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
shift || true
declare -A id=([f32]=0 [f16]=1 [q4_0]=2 [q4_1]=3 [q5_0]=6 [q5_1]=7 [q8_0]=8 [q2_K]=10
               [q3_K]=11 [q4_K]=12 [q5_K]=13 [q6_K]=14 [iq4_nl]=20 [iq4_xs]=23 [bf16]=30)
types=("$@")
if [ ${#types[@]} -eq 0 ]; then
  types=(f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl q2_K q3_K q4_K q5_K q6_K iq4_xs)
fi
K=${KVTIER_BENCH:-build/release/src/cli/kvtier-bench}
B=${BASE:-}
shapes=${SHAPES:-1 3}
shape_re=$(echo "$shapes" | tr ' ' '|')
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "# $(date -u '+%F %H:%M') UTC, $(git rev-parse --short HEAD), $(nproc) CPUs," \
     "load $(cut -d' ' -f1-3 /proc/loadavg), KVTIER_BENCH_THREADS=1, $reps repetitions"
echo "# kvtier-bench: $K${B:+; BASE: $B}"
run() {  # binary, type, json
  KVTIER_BENCH_THREADS=1 "$1" micro-matmul --benchmark_filter="BM_MatMul/${id[$2]}/($shape_re)/1/" \
    --benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true \
    --benchmark_format=json > "$3" 2> /dev/null
}
for t in "${types[@]}"; do
  [ -n "${id[$t]:-}" ] || { echo "unknown type $t (one of: ${!id[*]})" >&2; exit 2; }
  run "$K" "$t" "$out/new_$t.json"
  if [ -n "$B" ]; then run "$B" "$t" "$out/base_$t.json"; fi
  echo "  $t done ($(date -u +%H:%M:%S), load $(cut -d' ' -f1 /proc/loadavg))" >&2
done
python3 - "$out" "$reps" "${types[@]}" <<'EOF'
import json, os, sys
out, types = sys.argv[1], sys.argv[3:]
names = {0: "1024x1024", 1: "1024x3072", 2: "3072x1024", 3: "1024x151936"}
def load(path):
    rows = {}
    if not os.path.exists(path):
        return rows
    for b in json.load(open(path))["benchmarks"]:  # the median, or the one run (REPS 1)
        if b.get("aggregate_name", "median") != "median" or "error_message" in b:
            continue
        shape = int(b["run_name"].split("/")[2])
        if shape not in rows or b.get("aggregate_name") == "median":
            rows[shape] = b
    return rows
base = any(os.path.exists(os.path.join(out, f"base_{t}.json")) for t in types)
head = "| type | shape | ns | floor ns | x_floor | x_floor_cpu |"
if base:
    head += " base x_floor_cpu | new / base |"
print(head)
print("|---" * (head.count("|") - 1) + "|")
for t in types:
    new, old = load(os.path.join(out, f"new_{t}.json")), load(os.path.join(out, f"base_{t}.json"))
    for shape in sorted(new):
        b = new[shape]
        ns = b["real_time"] * {"us": 1e3, "ms": 1e6, "ns": 1.0}[b["time_unit"]]
        xf, xc = b["x_floor"], b.get("x_floor_cpu", float("nan"))
        line = f"| {t} | {names[shape]} | {ns:.0f} | {ns / xf:.0f} | {xf:.2f} | {xc:.2f} |"
        if base:
            oc = old.get(shape, {}).get("x_floor_cpu", float("nan"))
            line += f" {oc:.2f} | {xc / oc:.2f} |"
        print(line)
EOF
