#!/bin/bash
# The K-scheme table of docs/results/kv-cache.md (2026-11-27, "K schemes"): each row one
# `kvtier perplexity --kld` on the bundled model, ctx 512 (24 windows) and 2048 (6 windows).
# Usage: tools/kv_sim/build.sh && tools/kv_sim/measure.sh
set -euo pipefail
R=$(git rev-parse --show-toplevel)
cd "$R"
B=build/kvsim/kvtier-kvsim
one() {  # mode bits kv-type chunks ctx
  KVTIER_FAKEK=$1 KVTIER_FAKEK_BITS=$2 $B perplexity --file data/corpus/eval.txt --ctx $5 \
    --chunks $4 --kv-type $3 --kld --json --threads 2 2>/dev/null | tail -1 | python3 -c "
import json, sys; j = json.load(sys.stdin)
print('| ctx $5 | K $1 ($2 bits) | V ${3#*/} | %+.3f%% | %.5f | %.2f%% |' % (
    100 * (j['ppl'] / j['ppl_base'] - 1), j['kld'], 100 * j['same_top1']))"
}
for c in "512 24" "2048 6"; do
  set -- $c
  one none 4 rot4s0 $2 $1; one kivi64 4 f32/rot4s0 $2 $1; one kivi32 4 f32/rot4s0 $2 $1
  one mean_first 4 f32/rot4s0 $2 $1; one mean_all 4 f32/rot4s0 $2 $1
  one none 3 rot3s0 $2 $1; one kivi64 3 f32/rot3s0 $2 $1; one kivi32 3 f32/rot3s0 $2 $1
  one none 2 rot2s0 $2 $1; one kivi64 2 f32/rot2s0 $2 $1; one kivi64 3 f32/rot2s0 $2 $1
  one none 4 f32/rot4s0 $2 $1; one none 4 f32/rot3s0 $2 $1
done
