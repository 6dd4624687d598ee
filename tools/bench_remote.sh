#!/usr/bin/env bash
# Reload throughput of the remote tier beside redis-benchmark GET of the same value size, run
# alternately on one throw-away redis-server (loopback, persistence off), RUNS times each.
#   tools/bench_remote.sh BUILD_DIR [TOKENS] [FORMAT] [RUNS]
# Prints every run and the medians (MB/s) and their ratio.
set -euo pipefail
build=${1:?usage: tools/bench_remote.sh BUILD_DIR [TOKENS] [FORMAT] [RUNS]}
tokens=${2:-16384}
format=${3:-f16}
runs=${4:-5}
bench="$build/src/remote/kvtier_remote_bench"
dir=$(mktemp -d /tmp/kvtier_bench_remote_XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save "" --appendonly no \
  --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
trap 'kill "$(cat "$dir/redis.pid")" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
ours=() theirs=() distinct=()
for r in $(seq "$runs"); do
  line=$("$bench" --url "redis://127.0.0.1:$port" --tokens "$tokens" --format "$format" --runs 1)
  echo "kvtier: $line"
  size=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["value_bytes"])' "$line")
  ours+=("$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["mb_per_s"])' "$line")")
  blocks=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["blocks"])' "$line")
  csv=$(redis-benchmark -h 127.0.0.1 -p "$port" -t set,get -d "$size" -n "$blocks" -c 4 -P 32 \
        --csv 2>/dev/null | grep '"GET"')
  rps=$(echo "$csv" | cut -d, -f2 | tr -d '"')
  mbs=$(python3 -c "print(round($rps * $size / 1e6, 1))")
  echo "redis-benchmark GET -d $size -n $blocks -c 4 -P 32: $rps req/s = $mbs MB/s"
  theirs+=("$mbs")
  # The same over as many distinct keys as the prompt has blocks (redis-benchmark's own GET
  # reads one key again and again, its value hot in the server's cache; the tier reads
  # distinct values): SET every key of -r BLOCKS first (8x over covers them all), then GET.
  redis-benchmark -h 127.0.0.1 -p "$port" -t set -r "$blocks" -d "$size" -n $((blocks * 8)) \
    -c 4 -P 32 -q >/dev/null 2>&1
  csv=$(redis-benchmark -h 127.0.0.1 -p "$port" -t get -r "$blocks" -d "$size" -n "$blocks" \
        -c 4 -P 32 --csv 2>/dev/null | grep '"GET"')
  rps=$(echo "$csv" | cut -d, -f2 | tr -d '"')
  mbs=$(python3 -c "print(round($rps * $size / 1e6, 1))")
  echo "redis-benchmark GET -r $blocks (distinct keys): $rps req/s = $mbs MB/s"
  distinct+=("$mbs")
  redis-cli -p "$port" flushall >/dev/null
done
python3 - "${ours[*]}" "${theirs[*]}" "${distinct[*]}" <<'PY'
import statistics, sys
ours, theirs, distinct = ([float(x) for x in a.split()] for a in sys.argv[1:4])
mo, mt, md = statistics.median(ours), statistics.median(theirs), statistics.median(distinct)
print(f"median kvtier reload {mo:.1f} MB/s; redis-benchmark GET one key {mt:.1f} MB/s "
      f"(ratio {mo / mt:.2f}), {len(ours) and ''}distinct keys {md:.1f} MB/s (ratio {mo / md:.2f})")
PY
