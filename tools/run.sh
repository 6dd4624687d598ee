#!/usr/bin/env bash
# kvtier's main job on a fresh machine: installs what it needs, builds, and runs
# `kvtier serve` on the bundled model (http://127.0.0.1:8000/v1, OpenAI-compatible; Ctrl-C or
# SIGTERM drains and stops it). Arguments replace the default command, e.g.
# `tools/run.sh serve --port 9000 --ssd-cache-dir /tmp/kv`; `tools/run.sh bench ARGS` runs
# `kvtier-bench ARGS` instead (the benchmarks), e.g. `tools/run.sh bench kv-cache`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
if [ "${1:-}" = bench ]; then
  shift
  ninja -C build/release kvtier kvtier-bench >/dev/null
  exec build/release/src/cli/kvtier-bench "$@"
fi
ninja -C build/release kvtier >/dev/null
if [ $# -eq 0 ]; then set -- serve; fi
exec build/release/src/cli/kvtier "$@"
