#!/usr/bin/env bash
# Packs a CUDA build (-DKVTIER_CUDA=ON) for `serve_device_run.sh` on the GPU machine: kvtier
# and kvtier_cuda_model_test (stripped), the shared libraries ldd lists for them except glibc /
# libstdc++ / the NVIDIA driver / CUDA's (the GPU machine's), the evaluation text,
# serve_device_run.sh, serve_smoke.py and serve_load.py; xz, split into pieces of PIECE bytes
# (default 1400000: the device tool's 64 MiB counts the checkout's disk blocks) with their
# sha256.
#   bash src/cuda/serve_pack.sh BUILD_DIR DEST [EVAL_TEXT]
# Device side: cat DEST/payload.tar.xz.* | tar xJ -C /tmp/w (after checking payload.sha256).
set -euo pipefail
B=${1:?build dir}
DEST=${2:?destination folder}
TEXT=${3:-data/corpus/eval.txt}
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
mkdir -p "$tmp/bin" "$tmp/lib" "$DEST"
for b in "$B/src/cli/kvtier" "$B/src/cuda/kvtier_cuda_model_test"; do
  strip -o "$tmp/bin/$(basename "$b")" "$b"
done
for b in "$tmp"/bin/*; do
  ldd "$b" | awk '/=>/ {print $3}' | grep -v -E 'libcuda\.so|libcublas|^$' || true
done | sort -u | while read -r lib; do
  basename "$lib" | grep -q -E '^(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libcudart)\.so' &&
    continue
  cp -L "$lib" "$tmp/lib/"
done
cp "$TEXT" "$tmp/eval.txt"
cp src/cuda/serve_device_run.sh src/cuda/serve_smoke.py src/cuda/serve_load.py "$tmp/"
rm -f "$DEST"/payload.tar.xz*
tar cf - -C "$tmp" . | xz -9e -T2 > "$DEST/payload.tar.xz"
rm -rf "$tmp"
(cd "$DEST" && sha256sum payload.tar.xz > payload.sha256 && split -b "${PIECE:-1400000}" -d payload.tar.xz payload.tar.xz. && rm payload.tar.xz)
ls -la "$DEST"
