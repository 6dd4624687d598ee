#!/usr/bin/env bash
# Trains the head_dim-64 llama model and one small model per newer family (gemma3, phi3,
# qwen35) on ONE GPU in one device call: the processes share the GPU (they are small and
# mostly launch-bound, so side by side they cost little more wall time than the longest one).
# Each writes <name>.gguf, <name>.train_log.json and <name>.log into a work folder; at the
# end everything is packed as one tar split into 15 MiB parts $OUT/family.tar.partNN (the
# device returns at most 8 files of 16 MiB, 64 MiB in all). Join them here with
#   cat /work/.device/N/family.tar.part* | tar xf -
#
# Usage (device machine, data/train present): tools/train/train_family.sh MINUTES [PRESET...]
#   MINUTES: each model's wall-clock budget (kvtier-hd64 stops at 10 epochs before that);
#   PRESETS: default kvtier-hd64 kvtier-tiny-gemma3 kvtier-tiny-phi3 kvtier-tiny-qwen35.
set -uo pipefail
OUT="${OUT:-out}"
M="${1:-2.5}"
shift || true
presets=("$@")
[ ${#presets[@]} -eq 0 ] && presets=(kvtier-hd64 kvtier-tiny-gemma3 kvtier-tiny-phi3 kvtier-tiny-qwen35)
W="$(mktemp -d)"
mkdir -p "$OUT"
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PYTHONUNBUFFERED=1
pids=()
for p in "${presets[@]}"; do
  python3 tools/train/train.py --preset "$p" --minutes "$M" --out "$W" --split-mb 0 > "$W/$p.log" 2>&1 &
  pids+=($!)
done
rc=0
for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
for p in "${presets[@]}"; do
  echo "== $p"; grep -v " step " "$W/$p.log" | tail -n 25
done
(cd "$W" && tar cf - .) | split -b 15M -d - "$OUT/family.tar.part"
ls -la "$OUT"
exit $rc
