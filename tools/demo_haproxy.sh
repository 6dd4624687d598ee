#!/usr/bin/env bash
# docs/remote-tier.md's load-balanced demo: haproxy round-robin over three `kvtier serve`
# replicas, with the shared remote tier (one Redis) and without it, under bench-serve's
# multiturn workload. Prints bench-serve's summary for both; everything runs on loopback ports
# and is removed at the end.
#   tools/demo_haproxy.sh BUILD_DIR [CONVERSATIONS] [ROUNDS]
set -euo pipefail
build=${1:?usage: tools/demo_haproxy.sh BUILD_DIR [CONVERSATIONS] [ROUNDS]}
conversations=${2:-3}
rounds=${3:-4}
kvtier="$build/src/cli/kvtier"
bench="$build/src/cli/kvtier-bench"
dir=$(mktemp -d /tmp/kvtier_demo_haproxy_XXXXXX)
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
pids=()
stop_all() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}
cleanup() {
  stop_all
  [ -f "$dir/redis.pid" ] && kill "$(cat "$dir/redis.pid")" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --dir "$dir" --save "" --appendonly no \
  --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done

run() {  # $1: on|off
  local ports=() mode=$1
  for r in 1 2 3; do
    local extra=()
    [ "$mode" = on ] && extra=(--remote-cache "redis://127.0.0.1:$rport")
    "$kvtier" serve --port 0 --max-num-seqs 4 "${extra[@]}" > "$dir/$mode$r.out" \
      2> "$dir/$mode$r.log" &
    pids+=($!)
  done
  for r in 1 2 3; do
    for _ in $(seq 300); do grep -q listening "$dir/$mode$r.out" 2>/dev/null && break; sleep 0.1; done
    ports+=("$(sed -n 's/.*127.0.0.1:\([0-9]*\) .*/\1/p' "$dir/$mode$r.out")")
  done
  local fport
  fport=$(free_port)
  cat > "$dir/haproxy.cfg" <<CFG
global
  maxconn 256
defaults
  mode http
  option http-server-close
  timeout connect 5s
  timeout client 600s
  timeout server 600s
frontend kvtier
  bind 127.0.0.1:$fport
  default_backend replicas
backend replicas
  balance roundrobin
  server r1 127.0.0.1:${ports[0]}
  server r2 127.0.0.1:${ports[1]}
  server r3 127.0.0.1:${ports[2]}
CFG
  haproxy -f "$dir/haproxy.cfg" > "$dir/haproxy.log" 2>&1 &
  pids+=($!)
  sleep 1
  echo "== remote tier $mode: haproxy 127.0.0.1:$fport -> replicas ${ports[*]}"
  "$bench" serve --workload multiturn --url "http://127.0.0.1:$fport" \
    --conversations "$conversations" --rounds "$rounds" --system-tokens 256 \
    --turn-tokens 128 --max-tokens 16 --timeout 600
  for r in 1 2 3; do
    echo "replica $r: $(grep -c 'HIT' "$dir/$mode$r.log" || true) hits, $(grep -c 'MISS' "$dir/$mode$r.log" || true) misses"
  done
  stop_all
}
run off
redis-cli -p "$rport" flushall > /dev/null
run on
