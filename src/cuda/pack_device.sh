#!/usr/bin/env bash
# Packs what src/cuda/device_run.sh needs (include/, the src/ folders the standalone build
# compiles, googletest's source) into DEST/payload.tar.xz (default .cudawt in the checkout, a folder
# that .git/info/exclude ignores, so the device tool carries it: carry [".cudawt"]).
# Device command: mkdir -p /tmp/w && tar xJf .cudawt/payload.tar.xz -C /tmp/w && cd /tmp/w &&
#                 bash src/cuda/device_run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
DEST=${1:-$PWD/.cudawt}
GTEST=${GTEST_SRC:-/usr/src/googletest}
mkdir -p "$DEST"
tmp=$(mktemp -d)
cp -r include "$tmp/"
mkdir -p "$tmp/src"
for d in base quant kv kernels cuda; do
  cp -r "src/$d" "$tmp/src/"
done
# The CPU forward's element-wise ops (the reference of forward_test.cc; no Highway needed).
mkdir -p "$tmp/src/model"
cp src/model/ops.h src/model/ops.cc "$tmp/src/model/"
rm -rf "$tmp/src/quant/testdata"
find "$tmp/src" -name '*_test.cc' ! -path '*/src/cuda/*' -delete
# googletest/ alone (its top-level CMakeLists would want googlemock too).
cp -r "$GTEST/googletest" "$tmp/googletest"
rm -rf "$tmp/googletest/docs" "$tmp/googletest/samples" "$tmp/googletest/test"
tar cJf "$DEST/payload.tar.xz" -C "$tmp" .
rm -rf "$tmp"
ls -la "$DEST/payload.tar.xz"
