#!/bin/bash
# Decode speed with and without response_format (issue 31): 6 rounds, the three modes alternating.
# Prints one JSON line per run; compare decode_tokens_per_s.per_request_p50 within each round.
B=${KVTIER_BENCH:-build/release/src/cli/kvtier-bench}
S='{"type":"json_schema","json_schema":{"name":"c","schema":{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"friends":{"type":"array","items":{"type":"string"}}},"required":["name","age","friends"],"additionalProperties":false}}}'
cd "$(dirname "$0")/.."
for i in 1 2 3 4 5 6; do for RF in none '{"type":"json_object"}' "$S"; do
  echo "== $(date -u +%H:%M:%S) round $i mode ${RF:0:22} load $(cut -d' ' -f1 /proc/loadavg)"
  if [ "$RF" = none ]; then
    $B serve --workload concurrency --clients 1 --requests-per-client 3 --prompt-tokens 64 --max-tokens 96 --api chat --json -- --threads 2 2>/dev/null | tail -1
  else
    $B serve --workload concurrency --clients 1 --requests-per-client 3 --prompt-tokens 64 --max-tokens 96 --api chat --response-format "$RF" --json -- --threads 2 2>/dev/null | tail -1
  fi
done; done
