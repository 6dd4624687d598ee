#!/usr/bin/env bash
# Perplexity parity of trained GGUFs: llama.cpp's llama-perplexity against kvtier perplexity
# (same file, same text, same ctx; f16 KV; 2 threads), one line per model and a JSON of each.
#
# Usage: tools/train/parity.sh [--ctx N] [--chunks N] [--llama DIR] [--kvtier BIN] [--text F] GGUF...
#   defaults: ctx 512, every window (--chunks N: the first N windows, both tools), llama.cpp in /work/llama/build/bin, kvtier in build/release/src/cli,
#   text data/corpus/eval.txt (the held-out novel). Prints: name ctx llama_ppl kvtier_ppl diff%;
#   keeps llama-perplexity's log as ./<name>.llama-ppl.log.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CTX=512 CHUNKS=() LLAMA=/work/llama/build/bin KV="$ROOT/build/release/src/cli/kvtier"
TEXT="$ROOT/data/corpus/eval.txt"
while [ $# -gt 0 ]; do
  case "$1" in
    --ctx) CTX="$2"; shift 2 ;;
    --chunks) CHUNKS=(--chunks "$2"); shift 2 ;;
    --llama) LLAMA="$2"; shift 2 ;;
    --kvtier) KV="$2"; shift 2 ;;
    --text) TEXT="$2"; shift 2 ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { echo "usage: $0 [--ctx N] GGUF..." >&2; exit 2; }
printf '%-24s %5s %12s %12s %8s\n' model ctx llama.cpp kvtier diff%
for m in "$@"; do
  n="$(basename "$m" .gguf)"
  "$LLAMA/llama-perplexity" -m "$m" -f "$TEXT" -c "$CTX" "${CHUNKS[@]}" -t 2 > "$n.llama-ppl.log" 2>&1 || true
  lp="$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$n.llama-ppl.log")"
  kj="$("$KV" perplexity --model "$m" --file "$TEXT" --ctx "$CTX" "${CHUNKS[@]}" --threads 2 --json 2>&1 || true)"
  kp="$(printf '%s' "$kj" | python3 -c 'import json,sys
try: print(json.loads(sys.stdin.read())["ppl"])
except Exception: print("refused")')"
  d="$(python3 -c "import sys
try: print('%+.3f' % (100 * (float('$kp') / float('$lp') - 1)))
except Exception: print('-')")"
  printf '%-24s %5s %12s %12s %8s\n' "$n" "$CTX" "${lp:-error}" "$kp" "$d"
done
