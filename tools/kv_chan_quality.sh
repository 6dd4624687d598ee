#!/bin/bash
# The per-channel K rows (chan<b>g<G> K with a rot V) of docs/results/kv-cache.md
# (2026-11-27, "chan formats"): `kvtier perplexity --kld` on the bundled model and on the
# head_dim-64 model, ctx 512 (24 windows) and 2048 (6 windows), through tools/kv_quality.sh
# without the llama.cpp rows. TEXT: the held-out text (default data/corpus/eval.txt, or
# /work/main's where this checkout has none).
# Usage: tools/kv_chan_quality.sh [pairs] [hd64 model]
#        tools/kv_chan_quality.sh lowbit [hd64 model]   the chanmix rows (2026-11-27, "low-bit
#        pairs"): chan3g64/rot3s0 beside chanmix3g64/rot3s0, chanmix3g128/rot3s0,
#        chanmix2g64/rot3s0, chanmix2g64/rot2s0, chanmix2g128/rot2s0, chan2g64/rot2s0
set -euo pipefail
R=$(git rev-parse --show-toplevel)
cd "$R"
PAIRS=${1:-chan4g64/rot4s0,chan3g64/rot3s0}
if [ "$PAIRS" = lowbit ]; then
  PAIRS=chan3g64/rot3s0,chanmix3g64/rot3s0,chanmix3g128/rot3s0,chanmix2g64/rot3s0
  PAIRS=$PAIRS,chanmix2g64/rot2s0,chanmix2g128/rot2s0,chan2g64/rot2s0
fi
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
