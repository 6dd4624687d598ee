#!/bin/bash
# Builds build/kvsim/kvtier-kvsim: kvtier with a K fake-quantization hook in
# SequenceCache::Append (sequence_cache_hook.patch; applied for the build, then reverted: the
# hook is never committed). With --kv-type f32/V and KVTIER_FAKEK=MODE, K rows are quantized
# and dequantized by fakek.h's MODE before they are stored as f32, so `perplexity --kld`
# scores a K scheme (with the real V format) before it is a format.
set -euo pipefail
R=$(git rev-parse --show-toplevel)
cd "$R"
sed "s|#include \"../../tools/kv_sim/fakek.h\"|#include \"$R/tools/kv_sim/fakek.h\"|" \
  tools/kv_sim/sequence_cache_hook.patch | git apply
trap 'git checkout -q src/kv/sequence_cache.cc' EXIT
cmake -S . -B build/kvsim -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVTIER_CUDA=OFF \
  -DKVTIER_BUILD_BENCH=OFF > /dev/null
ninja -C build/kvsim -j2 kvtier
cp build/kvsim/src/cli/kvtier build/kvsim/kvtier-kvsim
