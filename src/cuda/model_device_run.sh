#!/usr/bin/env bash
# One GPU-machine call for the device-resident model (kvtier/cuda_model.h): the kvtier binaries
# built elsewhere with -DKVTIER_CUDA=ON (src/cuda/model_pack.sh puts them, their non-system
# libraries and the loader they were linked against into a payload), run through the carried
# loader so the GPU machine's own glibc does not matter; cuBLAS / the driver come from it.
#   bash model_device_run.sh REPO_ROOT    (from the unpacked payload; REPO_ROOT holds models/)
# Runs: kvtier_cuda_model_test; perplexity of the bundled model, GPU and CPU, KV f16 / q8_0 /
# q4_0 (CHUNKS windows of 512); greedy generate on GPU and CPU for three prompts (diffed);
# decode tokens/s of the bundled model and of a Qwen3-0.6B-shaped q8_0 file made here by
# make-test-model; the out-of-memory refusal. Logs under $OUT.
#   CHUNKS=n (default 100), SKIP_TESTS=1, SKIP_PPL=1, SKIP_GEN=1, SKIP_QWEN=1
set -uo pipefail
R=${1:?repo root}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
P=$PWD
M="$R/models/kvtier-austen-30m.gguf"
echo "== machine"
ldd --version 2>&1 | head -1
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
nproc
CUDA_LIB=""
for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -e "$d/libcublasLt.so.13" ] && { CUDA_LIB=$d; break; }
done
if [ -z "$CUDA_LIB" ]; then
  f=$(find / -xdev -name 'libcublasLt.so.13' 2>/dev/null | head -1)
  CUDA_LIB=$(dirname "$f")
fi
DRV=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 / {print $NF; exit}')
[ -n "$DRV" ] || DRV=$(find / -xdev -name 'libcuda.so.1' 2>/dev/null | head -1)
DRV=$(dirname "${DRV:-/usr/lib/x86_64-linux-gnu/libcuda.so.1}")
echo "cuBLAS from: $CUDA_LIB; driver from: $DRV; LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
LP="$P/lib:$CUDA_LIB:$DRV${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ -e "$P/lib/ld-linux-x86-64.so.2" ]; then  # packed with CARRY_LIBC=1
  run() { "$P/lib/ld-linux-x86-64.so.2" --library-path "$LP" "$@"; }
  run --list "$P/bin/kvtier" | grep -E "cublas|cudart|libcuda|not found" || true
else
  export LD_LIBRARY_PATH="$LP"
  run() { "$@"; }
  ldd "$P/bin/kvtier" | grep -E "cublas|cudart|hwy|not found" || true
fi
K="$P/bin/kvtier"
rc=0
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  echo "== kvtier_cuda_model_test (${SECONDS}s)"
  run "$P/bin/kvtier_cuda_model_test" 2>&1 | tee "$OUT/model_test.log" | grep -v "^\[ RUN\|^\[       OK" || true
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
fi
if [ "${SKIP_PPL:-0}" != 1 ]; then
  echo "== perplexity, ${CHUNKS:-100} windows of 512, GPU and CPU (${SECONDS}s)"
  for kv in f16 q8_0 q4_0; do
    run "$K" perplexity --model "$M" --file "$P/eval.txt" --ctx 512 --chunks "${CHUNKS:-100}" \
      --kv-type "$kv" --device cpu --threads 5 --json > "$OUT/ppl_cpu_$kv.json" 2> "$OUT/ppl_cpu_$kv.err" &
  done
  for kv in f16 q8_0 q4_0; do
    run "$K" perplexity --model "$M" --file "$P/eval.txt" --ctx 512 --chunks "${CHUNKS:-100}" \
      --kv-type "$kv" --device cuda --json > "$OUT/ppl_cuda_$kv.json" 2> "$OUT/ppl_cuda_$kv.err"
    echo "cuda $kv: $(cat "$OUT/ppl_cuda_$kv.json") $(tail -c 300 "$OUT/ppl_cuda_$kv.err" | tr '\r' '\n' | tail -1)"
  done
  wait
  for kv in f16 q8_0 q4_0; do
    echo "cpu  $kv: $(cat "$OUT/ppl_cpu_$kv.json") $(tail -c 300 "$OUT/ppl_cpu_$kv.err" | tr '\r' '\n' | tail -1)"
  done
fi
if [ "${SKIP_GEN:-0}" != 1 ]; then
  echo "== greedy generate, GPU vs CPU, KV f16 and q8_0 (${SECONDS}s)"
  i=0
  for prompt in "It is a truth universally acknowledged" "Captain Wentworth had no fortune." \
                "The morning was fine, and"; do
    i=$((i + 1))
    for kv in f16 q8_0; do
      for dev in cuda cpu; do
        run "$K" generate --model "$M" --prompt "$prompt" --max-tokens 128 --temperature 0 \
          --kv-type "$kv" --device "$dev" --stats > "$OUT/gen_${i}_${kv}_$dev.txt" 2> "$OUT/gen_${i}_${kv}_$dev.err"
      done
      if cmp -s "$OUT/gen_${i}_${kv}_cuda.txt" "$OUT/gen_${i}_${kv}_cpu.txt"; then
        same="identical ($(wc -c < "$OUT/gen_${i}_${kv}_cpu.txt") bytes)"
      else
        same="DIFFERENT: $(cmp "$OUT/gen_${i}_${kv}_cuda.txt" "$OUT/gen_${i}_${kv}_cpu.txt" 2>&1 | head -1)"
      fi
      echo "prompt $i kv $kv: $same; cuda: $(tail -1 "$OUT/gen_${i}_${kv}_cuda.err")"
      echo "                    cpu:  $(tail -1 "$OUT/gen_${i}_${kv}_cpu.err")"
    done
  done
  head -c 400 "$OUT/gen_1_f16_cuda.txt"; echo
  echo "== decode speed, bundled model, 512 tokens, GPU (${SECONDS}s)"
  for kv in f16 q8_0 q4_0; do
    run "$K" generate --model "$M" --prompt "It is a truth universally acknowledged" \
      --max-tokens 512 --temperature 0 --kv-type "$kv" --device cuda --stats 2>&1 >/dev/null | tail -1 | sed "s/^/$kv: /"
  done
  echo "-- f16 KV without CUDA graphs (plain launches per step)"
  KVTIER_CUDA_GRAPHS=0 run "$K" generate --model "$M" --prompt "It is a truth universally acknowledged" \
    --max-tokens 512 --temperature 0 --device cuda --stats 2>&1 >/dev/null | tail -1
  echo "-- f16 KV on the CPU (16 cores)"
  run "$K" generate --model "$M" --prompt "It is a truth universally acknowledged" \
    --max-tokens 512 --temperature 0 --device cpu --stats 2>&1 >/dev/null | tail -1
fi
if [ "${SKIP_QWEN:-0}" != 1 ]; then
  echo "== Qwen3-0.6B-shaped q8_0 (make-test-model), decode on the GPU (${SECONDS}s)"
  run "$K" make-test-model --out /tmp/q3.gguf --weight-type q8_0 --text-fillers 2>&1 | tail -2
  for kv in f16 q8_0 q4_0; do
    run "$K" generate --model /tmp/q3.gguf --prompt "Hello there, how are you today?" \
      --max-tokens 256 --temperature 0 --kv-type "$kv" --device cuda --stats 2>&1 >/dev/null | tail -1 | sed "s/^/$kv: /"
  done
  KVTIER_CUDA_GRAPHS=0 run "$K" generate --model /tmp/q3.gguf --prompt "Hello there, how are you today?" \
    --max-tokens 256 --temperature 0 --device cuda --stats 2>&1 >/dev/null | tail -1 | sed "s/^/f16, no graphs: /"
  echo "-- the same on the CPU (16 cores), 32 tokens"
  run "$K" generate --model /tmp/q3.gguf --prompt "Hello there, how are you today?" \
    --max-tokens 32 --temperature 0 --device cpu --stats 2>&1 >/dev/null | tail -1
  echo "-- a context too large for the GPU (900000 tokens of f16 KV, ~103 GB)"
  run "$K" generate --model /tmp/q3.gguf --prompt "Hello" --max-tokens 900000 --device cuda \
    > "$OUT/oom.txt" 2>&1
  echo "exit code $?: $(tail -1 "$OUT/oom.txt")"
fi
echo "== done (${SECONDS}s), tests rc $rc"
exit $rc
