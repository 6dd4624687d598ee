#!/bin/bash
# The per-channel K rows (chan<b>g<G> K with a rot V) of docs/results/kv-cache.md
# (2026-11-27, "chan formats"): `kvtier perplexity --kld` on the bundled model and on the
# head_dim-64 model, ctx 512 (24 windows) and 2048 (6 windows), through tools/kv_quality.sh
# without the llama.cpp rows. TEXT: the held-out text (default data/corpus/eval.txt, or
# /work/main's where this checkout has none).
# Usage: tools/kv_chan_quality.sh [pairs] [hd64 model]
set -euo pipefail
R=$(git rev-parse --show-toplevel)
cd "$R"
PAIRS=${1:-chan4g64/rot4s0,chan3g64/rot3s0}
HD64=${2:-/work/scratch_train/kvtier-hd64.gguf}
export LLAMA_PERPLEXITY=/nonexistent
if [ -z "${TEXT:-}" ]; then
  TEXT=data/corpus/eval.txt
  [ -f "$TEXT" ] || TEXT=/work/main/data/corpus/eval.txt
fi
export TEXT
for run in "models/kvtier-austen-30m.gguf 512 24" "models/kvtier-austen-30m.gguf 2048 6" \
           "$HD64 512 24" "$HD64 2048 6"; do
  set -- $run
  [ -f "$1" ] || { echo "skipping $1 (not found)"; continue; }
  tools/kv_quality.sh "$1" "$2" "$3" "$PAIRS"
done
