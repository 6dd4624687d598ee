#!/usr/bin/env bash
# Trains the head_dim-64 llama model and one small model per newer family (gemma3, phi3,
# qwen35) on ONE GPU in one device call: the four processes share the GPU (they are small and
# mostly launch-bound, so running them side by side costs little more wall time than the
# longest one). Each writes $OUT/<name>.gguf (split into .partN of 15 MiB when bigger),
# $OUT/<name>.train_log.json and $OUT/<name>.log.
#
# Usage (device machine, carry data/train): tools/train/train_family.sh [MINUTES]
#   MINUTES: the wall-clock budget of each model (default 2.5); kvtier-hd64 stops at 10 epochs.
set -uo pipefail
OUT="${OUT:-out}"
M="${1:-2.5}"
mkdir -p "$OUT"
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONUNBUFFERED=1
pids=()
for p in kvtier-hd64 kvtier-tiny-gemma3 kvtier-tiny-phi3 kvtier-tiny-qwen35; do
  python3 tools/train/train.py --preset "$p" --minutes "$M" --out "$OUT" \
    > "$OUT/$p.log" 2>&1 &
  pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
for p in kvtier-hd64 kvtier-tiny-gemma3 kvtier-tiny-phi3 kvtier-tiny-qwen35; do
  echo "== $p"; grep -v "^step\|^kvtier.* step " "$OUT/$p.log" | tail -n 30
done
nvidia-smi --query-gpu=name,memory.used --format=csv || true
exit $rc
