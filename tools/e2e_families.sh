#!/usr/bin/env bash
# Issue 33's e2e run of cache correctness for every family on the tiny trained models: starts
# `kvtier serve` on each (RAM + SSD tier, write-through) and checks through the HTTP API that
# greedy answers are identical cold, on a RAM hit, on a hit between two resume points and on
# an SSD hit after a restart (src/server/e2e/server_e2e_families.test.mjs; ctest runs the
# same test on random-weight files of each family).
#
#   tools/e2e_families.sh [build dir (build/release)] [models dir (/work/scratch_train)]
#
# Models: kvtier-tiny-{gemma3,phi3,qwen35}.gguf in the models dir, and the bundled llama
# model (models/kvtier-austen-30m.gguf) as the dense one. Env FAMILIES overrides the list
# ("arch=path,arch=path").
set -euo pipefail
BUILD=${1:-build/release}
DIR=${2:-/work/scratch_train}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEFAULT="llama=$ROOT/models/kvtier-austen-30m.gguf"
for a in gemma3 phi3 qwen35; do DEFAULT="$DEFAULT,$a=$DIR/kvtier-tiny-$a.gguf"; done
export KVTIER_E2E_FAMILY_MODELS=${FAMILIES:-$DEFAULT}
echo "# $(date -u +%FT%TZ) commit $(git -C "$ROOT" rev-parse --short HEAD); models: $KVTIER_E2E_FAMILY_MODELS"
exec bash "$ROOT/src/server/e2e/run.sh" "$BUILD/src/cli/kvtier" "$BUILD" server_e2e_families.test.mjs
