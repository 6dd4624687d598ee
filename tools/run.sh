#!/usr/bin/env bash
# kvtier's main job on a fresh machine: installs what it needs, builds, and runs
# `kvtier bench-kv-cache` (until the server lands). Arguments replace the default command,
# e.g. `tools/run.sh bench-kv-cache --dtype f32 --json`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build/release kvtier >/dev/null
if [ $# -eq 0 ]; then set -- bench-kv-cache; fi
exec build/release/src/cli/kvtier "$@"
