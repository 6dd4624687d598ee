#!/usr/bin/env bash
# Packs a CUDA build of kvtier (-DKVTIER_CUDA=ON) for a GPU machine without its Debian
# libraries: the kvtier binary and kvtier_cuda_model_test, the shared libraries `ldd` lists for
# them except the NVIDIA driver, CUDA's and glibc / libstdc++ (those come from the GPU machine;
# CARRY_LIBC=1 also packs glibc, libstdc++ and the loader they were linked against, for a
# machine with an older glibc), the evaluation text and src/cuda/model_device_run.sh, into
# DEST/payload.tar.xz. Device command (carry DEST's folder):
#   R=$PWD && mkdir -p /tmp/w && tar xJf <DEST>/payload.tar.xz -C /tmp/w && cd /tmp/w &&
#   bash model_device_run.sh "$R"
#   bash src/cuda/model_pack.sh BUILD_DIR DEST [EVAL_TEXT]
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
  if [ "${CARRY_LIBC:-0}" != 1 ] &&
     basename "$lib" | grep -q -E '^(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|libcudart)\.so'; then
    continue
  fi
  cp -L "$lib" "$tmp/lib/"
done
if [ "${CARRY_LIBC:-0}" = 1 ]; then
  cp -L /lib64/ld-linux-x86-64.so.2 "$tmp/lib/ld-linux-x86-64.so.2"
fi
cp "$TEXT" "$tmp/eval.txt"
cp src/cuda/model_device_run.sh "$tmp/"
ls -la "$tmp/bin" "$tmp/lib"
tar cf - -C "$tmp" . | xz -9e -T2 > "$DEST/payload.tar.xz"
rm -rf "$tmp"
ls -la "$DEST/payload.tar.xz"
