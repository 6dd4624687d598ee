#!/bin/bash
# The simulated low-bit rows of docs/results/kv-cache.md (2026-11-27, "low-bit pairs"): K and
# V schemes that are not formats yet, through the kv_sim hook (tools/kv_sim/build.sh first).
# Bundled model (and the head_dim-64 model for the 3.5-bit pair), ctx 512, 24 windows.
# Usage: tools/kv_sim/build.sh && tools/kv_sim/lowbit.sh [hd64 model]
set -euo pipefail
R=$(git rev-parse --show-toplevel)
cd "$R"
B=build/kvsim/kvtier-kvsim
HD64=${1:-/work/scratch_train/kvtier-hd64.gguf}
TEXT=data/corpus/eval.txt
[ -f "$TEXT" ] || TEXT=/work/main/data/corpus/eval.txt
one() {  # label model kv-type (the KVTIER_FAKE* variables come from the caller)
  $B perplexity --model "$2" --file "$TEXT" --ctx 512 --chunks 24 --kv-type "$3" --kld --json \
    --threads 2 2>/dev/null | tail -1 | python3 -c "
import json, sys; j = json.load(sys.stdin)
print('| $1 | $(basename "$2") | %+.3f%% | %.5f | %.4f | %.2f%% |' % (
    100 * (j['ppl'] / j['ppl_base'] - 1), j['kld'], j['kld_p99'], 100 * j['same_top1']))"
}
M=models/kvtier-austen-30m.gguf
echo "| scheme | model | ΔPPL | KLD | 99% KLD | same top-1 |"
echo "|---|---|---|---|---|---|"
KVTIER_FAKEK=kivi64 KVTIER_FAKEK_BITS=3 one "K chan3g64 (sim) + rot3s0, 3.5" $M f32/rot3s0
KVTIER_FAKEK=alloc64 KVTIER_FAKEK_AVG=3 one "K 3-bit g64, bits by error (3.5) + rot3s0" $M f32/rot3s0
KVTIER_FAKEK=alloc64 KVTIER_FAKEK_AVG=3 KVTIER_FAKEK_GAMMA=1.3 one "K 3-bit g64, levels gamma 1.3 + rot3s0" $M f32/rot3s0
KVTIER_FAKEK=alloc64 KVTIER_FAKEK_AVG=3.5 one "K 3.5-bit g64 greedy (4.0) + rot3s0, 3.75" $M f32/rot3s0
KVTIER_FAKEK=alloc64 KVTIER_FAKEK_AVG=3.5 KVTIER_FAKEK_RANK=1 one "K 3.5-bit g64 by range rank (4.0) + rot3s0, 3.75" $M f32/rot3s0
KVTIER_FAKEK=alloc64 KVTIER_FAKEK_AVG=3.5 KVTIER_FAKEK_META8=1 one "K 3.5-bit g64 8-bit meta (3.75) + rot3s0, 3.625" $M f32/rot3s0
KVTIER_FAKEV=vrot32 KVTIER_FAKEV_BITS=3 one "K exact + V rot3 fit, 32-blocks" $M f32/f32
KVTIER_FAKEV=vrot64 KVTIER_FAKEV_BITS=3 one "K exact + V rot3 fit, 64-blocks (3.25)" $M f32/f32
for m in $M $HD64; do
  [ -f "$m" ] || continue
  KVTIER_FAKEK=alloc64 KVTIER_FAKEK_AVG=3.5 KVTIER_FAKEK_META8=1 KVTIER_FAKEK_RANK=1 \
    KVTIER_FAKEV=vrot64 KVTIER_FAKEV_BITS=3 one "K 3.5-bit g64 8-bit meta (3.75) + V rot3 64-blocks (3.25), 3.5" $m f32/f32
done
for m in $M $HD64; do  # one layer's K at 3 bits, the rest exact: the per-layer sensitivity
  [ -f "$m" ] || continue
  for L in 0 1 2 3 4 5 6 7; do
    lav=$(python3 -c "print(','.join('3' if i == $L else '-1' for i in range(8)))")
    KVTIER_FAKEK=alloc64 KVTIER_FAKEK_LAVG=$lav one "layer $L K only, 3-bit g64" $m f32/f32
  done
done
# Per-layer K bits (uniform widths within a layer, 8-bit metadata: K 3.5 bits with 3.25 code
# bits on average over the 8 layers) + rot3s0 V: 3.5 bits. The same rule on both models, then
# each model's layers by the sensitivity above.
run_layers() {  # label model lavg ctx chunks
  KVTIER_FAKEK=alloc64 KVTIER_FAKEK_META8=1 KVTIER_FAKEK_RANK=1 KVTIER_FAKEK_LAVG=$3 \
    $B perplexity --model "$2" --file "$TEXT" --ctx $4 --chunks $5 --kv-type f32/rot3s0 --kld \
    --json --threads 2 2>/dev/null | tail -1 | python3 -c "
import json, sys; j = json.load(sys.stdin)
print('| $1 ctx $4 | $(basename "$2") | %+.3f%% | %.5f | %.4f | %.2f%% |' % (
    100 * (j['ppl'] / j['ppl_base'] - 1), j['kld'], j['kld_p99'], 100 * j['same_top1']))"
}
for c in "512 24" "2048 6"; do
  set -- $c
  run_layers "K bits by layer 2,2,2,4,4,4,4,4 + rot3s0, 3.5" $M 2,2,2,4,4,4,4,4 $1 $2
  run_layers "K bits by layer 2,2,2,3,3,5,5,4 + rot3s0, 3.5" $M 2,2,2,3,3,5,5,4 $1 $2
  [ -f "$HD64" ] || continue
  run_layers "K bits by layer 2,2,2,4,4,4,4,4 + rot3s0, 3.5" $HD64 2,2,2,4,4,4,4,4 $1 $2
  run_layers "K bits by layer 2,2,2,2,3,5,5,5 + rot3s0, 3.5" $HD64 2,2,2,2,3,5,5,5 $1 $2
done
KVTIER_FAKEK=alloc64 KVTIER_FAKEK_AVG=2.5 KVTIER_FAKEK_META8=1 KVTIER_FAKEK_RANK=1 \
  KVTIER_FAKEV=vrot64 KVTIER_FAKEV_BITS=2 one "K 2.5-bit g64 8-bit meta (2.75) + V rot2 64-blocks (2.25), 2.5" $M f32/f32
KVTIER_FAKEK=alloc64 KVTIER_FAKEK_AVG=2.25 KVTIER_FAKEK_META8=1 KVTIER_FAKEK_RANK=1 \
  one "K 2.25-bit g64 8-bit meta (2.5) + rot2s0, 2.5" $M f32/rot2s0
