#!/bin/bash
# bf16 vs f32 recurrent-state snapshots on a hybrid model (issue 33; docs/results/prefix-cache.md):
#   tools/state_type_eval.sh [BUILD_DIR] [MODEL] [TEXT] [windows] [prefix] [next]
# Tokenizes TEXT with the model's tokenizer (kvtier tokenize), then runs
# kvtier_state_type_eval: KLD of the next tokens' distributions, perplexity and greedy tokens
# after resuming from the live state, an f32 snapshot and a bf16 snapshot.
set -euo pipefail
build=${1:-build/release}
model=${2:-/work/scratch_train/kvtier-tiny-qwen35.gguf}
text=${3:-data/corpus/eval.txt}
windows=${4:-16}
prefix=${5:-256}
next=${6:-64}
ids=$(mktemp /tmp/kvtier_state_ids_XXXXXX)
trap 'rm -f "$ids"' EXIT
"$build/src/cli/kvtier" tokenize --model "$model" < "$text" > "$ids"
date -u +"%F %T UTC"; uptime; git log -1 --format="commit %h %s" 2>/dev/null || true
"$build/src/engine/kvtier_state_type_eval" "$model" "$ids" "$windows" "$prefix" "$next"
