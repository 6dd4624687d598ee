#!/usr/bin/env bash
# The agent benchmark (issue 31), kvtier and llama-server side by side on the same request
# sequence: `kvtier-bench serve --workload agent` (one tool-using conversation of ROUNDS turns, a
# ~4K-token system prompt and a 5-tool list on every request, scripted tool calls and results)
# against `kvtier serve` (started by kvtier-bench) and against llama-server (same GGUF, 2 threads,
# --jinja with the same chat template; its slot defaults: cache_prompt on, --cache-reuse 0).
# The bundled model's template has no tools, so both servers render the Qwen 2.5 template of
# the shared corpus (Hermes <tool_call> syntax). Prints per-turn TTFT and cached fraction.
#   tools/bench_agent.sh BUILD_DIR [ROUNDS] [LLAMA_SERVER] [TEMPLATE]
set -euo pipefail
build=${1:?usage: tools/bench_agent.sh BUILD_DIR [ROUNDS] [LLAMA_SERVER] [TEMPLATE]}
rounds=${2:-8}
llama=${3:-/work/llama/build/bin/llama-server}
here=$(cd "$(dirname "$0")/.." && pwd)
tmpl=${4:-$here/../shared/testdata/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja}
[ -f "$tmpl" ] || tmpl=/work/shared/testdata/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja
model="$here/models/kvtier-austen-30m.gguf"
bench="$build/src/cli/kvtier-bench"
dir=$(mktemp -d /tmp/kvtier_bench_agent_XXXXXX)
# The same prompts for both: a fixed chars-per-token ratio (no per-server calibration).
args=(serve --workload agent --api chat --rounds "$rounds" --system-tokens 4000
      --turn-tokens 96 --max-tokens 16 --chars-per-token 3.8 --json)
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

"$bench" "${args[@]}" --server-bin "$build/src/cli/kvtier" -- --threads 2 \
  --max-model-len 8192 --chat-template-file "$tmpl" > "$dir/kvtier.json"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# The bundled model was trained at 2048 tokens; llama-server caps a slot there unless the
# GGUF's context_length is overridden (kvtier: --max-model-len 8192 above).
"$llama" -m "$model" -t 2 -c 8192 -np 1 --jinja --chat-template-file "$tmpl" \
  --override-kv llama.context_length=int:8192 \
  --host 127.0.0.1 --port "$port" > "$dir/llama.log" 2>&1 &
pid=$!
for _ in $(seq 600); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  sleep 0.1
done
"$bench" "${args[@]}" --url "http://127.0.0.1:$port" --server-pid "$pid" > "$dir/llama.json"

python3 - "$dir/kvtier.json" "$dir/llama.json" <<'PY'
import json, sys
runs = [json.load(open(p)) for p in sys.argv[1:3]]
names = ["kvtier", "llama-server"]
for name, r in zip(names, runs):
    if r.get("first_error"):
        print(f"{name}: first error: {r['first_error']}")
print("turn | " + " | ".join(f"{n} prompt / cached / cached % / TTFT ms" for n in names))
rows = [r["rounds"] for r in runs]
for i in range(len(rows[0])):
    cells = []
    for rs in rows:
        x = rs[i]
        p, c = x["prompt_tokens"], x["cached_tokens"]
        cells.append(f"{p} / {c} / {100.0 * c / max(p, 1):.1f}% / {x['ttft_ms']:.1f}")
    print(f"{i + 1} | " + " | ".join(cells))
for name, rs in zip(names, rows):
    cold = rs[0]["ttft_ms"]
    warm = sorted(x["ttft_ms"] for x in rs[1:])
    med = warm[len(warm) // 2] if warm else 0
    worst_hit = min((x["cached_tokens"] / max(x["prompt_tokens"], 1) for x in rs[1:]), default=0)
    print(f"{name}: cold TTFT {cold:.1f} ms, turns 2+ median {med:.1f} ms "
          f"({cold / max(med, 1e-9):.1f}x below cold), lowest cached fraction turns 2+ "
          f"{100 * worst_hit:.1f}%")
PY
