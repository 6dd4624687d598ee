#!/usr/bin/env bash
# Runs the `kvtier serve` end-to-end tests (the official openai and @anthropic-ai/sdk npm
# clients against a real server): run.sh KVTIER_BIN BUILD_DIR [GLOB]; GLOB picks the test
# files (default '*.test.mjs'; '*.browser.mjs' is the status page in headless Chromium).
# Installs the client into BUILD_DIR/e2e (npm ci from the committed package-lock.json, again
# only when the lock changes), copies the tests there (ES modules resolve packages next to the
# importing file) and runs each test file with Node's built-in runner, one after the other
# (each starts its own server). Needs node >= 18 and npm: tools/setup.sh installs them.
# KVTIER_E2E_FILTER=regex runs only the matching tests (node --test-name-pattern).
set -euo pipefail

if [ $# -ne 2 ] && [ $# -ne 3 ]; then
  echo "usage: $0 KVTIER_BIN BUILD_DIR [GLOB]" >&2
  exit 2
fi
GLOB=${3:-*.test.mjs}
BIN=$(realpath "$1")
BUILD_DIR=$2
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ ! -x "$BIN" ]; then
  echo "run.sh: $BIN is not an executable kvtier binary" >&2
  exit 1
fi

for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "run.sh: '$tool' is not on PATH: the server end-to-end tests need Node.js >= 18 and npm" \
         "(tools/setup.sh installs Debian's nodejs and npm)" >&2
    exit 1
  fi
done
NODE_MAJOR=$(node -p 'process.versions.node.split(".")[0]')
if [ "$NODE_MAJOR" -lt 18 ]; then
  echo "run.sh: Node.js $(node --version) is too old: the end-to-end tests need >= 18" >&2
  exit 1
fi

DIR="$BUILD_DIR/e2e"
mkdir -p "$DIR"
# The client: reinstalled only when package.json / package-lock.json change.
changed=0
for f in package.json package-lock.json; do
  if ! cmp -s "$SRC/$f" "$DIR/$f"; then
    cp "$SRC/$f" "$DIR/$f"
    changed=1
  fi
done
if [ "$changed" = 1 ] || [ ! -d "$DIR/node_modules/openai" ] ||
   [ ! -d "$DIR/node_modules/@anthropic-ai/sdk" ] ||
   [ ! -d "$DIR/node_modules/playwright-core" ]; then
  echo "run.sh: npm ci in $DIR" >&2
  # A failed earlier install must not look installed next time.
  if ! (cd "$DIR" && npm ci --no-audit --no-fund --loglevel=error); then
    rm -f "$DIR/package-lock.json"
    echo "run.sh: npm ci failed (is the npm registry reachable?)" >&2
    exit 1
  fi
fi
# The tests themselves: always the current sources.
rm -f "$DIR"/*.mjs
cp "$SRC"/*.mjs "$DIR/"

args=()
if [ -n "${KVTIER_E2E_FILTER:-}" ]; then
  args+=(--test-name-pattern="$KVTIER_E2E_FILTER")
fi
cd "$DIR"
export KVTIER_BIN="$BIN"
status=0
start=$(date +%s)
for t in $GLOB; do
  echo "== $t" >&2
  node --test "${args[@]}" "$t" || status=1
done
echo "run.sh: end-to-end tests took $(($(date +%s) - start)) s; $([ $status = 0 ] && echo passed || echo FAILED)" >&2
exit $status
