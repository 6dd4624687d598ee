#!/usr/bin/env bash
# One GPU-machine call for `kvtier serve --device cuda` (issue 35): from a payload made by
# src/cuda/serve_pack.sh (kvtier, kvtier_cuda_model_test, their non-system libraries, this
# script, serve_smoke.py, serve_load.py, the evaluation text), run from the unpacked payload:
#   bash serve_device_run.sh REPO_ROOT     (REPO_ROOT holds models/; logs under $OUT)
# Runs: the GPU model tests (batched rows included); the OpenAI-API smoke run (serve_smoke.py:
# a cache hit gives the cold text, 8 rows at once equal each alone, chat, a bad request) on a
# GPU server with a CPU server beside it; serve_load.py with 8 and 32 concurrent clients on
# the bundled model and on a Qwen3-0.6B-shaped q8_0 file made here, GPU (and the bundled
# model's 8 on the CPU for scale); TTFT of a long prompt cold and again from the host-RAM
# prefix cache (TTFT_CHARS characters, default 16000 and 125000: ~4K and ~31K tokens).
#   SKIP_TESTS=1 SKIP_SMOKE=1 SKIP_BENCH=1 SKIP_QWEN=1 SKIP_TTFT=1; EXTRA=1: Qwen3 at 32 clients
#   also with the default rot4s0 store and with the matvec alone (KVTIER_CUDA_GEMM_MIN)
set -uo pipefail
R=${1:?repo root}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
P=$PWD
M="$R/models/kvtier-austen-30m.gguf"
echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
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
DRV=$(dirname "${DRV:-/usr/lib/x86_64-linux-gnu/libcuda.so.1}")
export LD_LIBRARY_PATH="$P/lib:$CUDA_LIB:$DRV${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ldd "$P/bin/kvtier" | grep -E "not found" || true
K="$P/bin/kvtier"
rc=0
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  echo "== kvtier_cuda_model_test (${SECONDS}s)"
  timeout 240 "$P/bin/kvtier_cuda_model_test" > "$OUT/model_test.log" 2>&1 || rc=1
  grep -E "rows vs alone|^\[  (PASSED|FAILED)|FAILED|tests ran" "$OUT/model_test.log"
fi
wait_listen() {  # $1 log file
  for _ in $(seq 1 600); do
    grep -q "listening on" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "server did not start: $(tail -3 "$1")"
  return 1
}
if [ "${SKIP_SMOKE:-0}" != 1 ]; then
  echo "== OpenAI-API smoke run, GPU server and CPU server (${SECONDS}s)"
  "$K" serve --model "$M" --device cuda --port 8391 --kv-type f16 --kv-store-type active \
    --kv-pool-mb 2048 --max-num-seqs 8 > "$OUT/serve_gpu.out" 2> "$OUT/serve_gpu.log" &
  GPID=$!
  "$K" serve --model "$M" --device cpu --port 8392 --kv-type f16 --kv-store-type active \
    --kv-pool-mb 2048 --max-num-seqs 8 --threads 8 > "$OUT/serve_cpu.out" 2> "$OUT/serve_cpu.log" &
  CPID=$!
  if wait_listen "$OUT/serve_gpu.out" && wait_listen "$OUT/serve_cpu.out"; then
    timeout 300 python3 "$P/serve_smoke.py" http://127.0.0.1:8391 "$P/eval.txt" \
      http://127.0.0.1:8392 2>&1 | tee "$OUT/smoke.log"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    echo "-- curl, one completion:"
    curl -s -m 60 http://127.0.0.1:8391/v1/completions -H 'Content-Type: application/json' \
      -d '{"prompt":"It is a truth universally acknowledged","max_tokens":24,"temperature":0}'
    echo
  else
    rc=1
  fi
  kill "$GPID" "$CPID" 2>/dev/null
  wait "$GPID" "$CPID" 2>/dev/null
  grep -E "device=|cache_fetch|error|FAILED" "$OUT/serve_gpu.log" | head -12
  echo "-- fault injection: token 64 ('@') gets a NaN embedding on the GPU (${SECONDS}s)"
  KVTIER_CUDA_NAN_TOKEN=64 "$K" serve --model "$M" --device cuda --port 8394 --kv-type f16 \
    --kv-pool-mb 1024 > "$OUT/serve_fault.out" 2> "$OUT/serve_fault.log" &
  FPID=$!
  if wait_listen "$OUT/serve_fault.out"; then
    timeout 120 python3 "$P/serve_smoke.py" fault http://127.0.0.1:8394 "$P/eval.txt" || rc=1
  else
    rc=1
  fi
  kill "$FPID" 2>/dev/null
  wait "$FPID" 2>/dev/null
fi
serve_start() {  # log name, model, serve args...: starts a server on port 8393
  local name=$1 model=$2
  shift 2
  env ${SERVE_ENV:-} "$K" serve --model "$model" --port 8393 "$@" > "$OUT/$name.out" 2> "$OUT/$name.log" &
  SPID=$!
  wait_listen "$OUT/$name.out"
}
serve_stop() {
  kill "$SPID" 2>/dev/null
  wait "$SPID" 2>/dev/null
}
load() {  # name, model, clients, serve args...
  local name=$1 model=$2 clients=$3
  shift 3
  if serve_start "serve_$name" "$model" "$@"; then
    echo "-- $name: $(timeout 300 python3 "$P/serve_load.py" concurrency http://127.0.0.1:8393 \
      "$P/eval.txt" "$clients" 2 1000 128 2>&1 | tail -1)"
  fi
  serve_stop
  grep "cuda_step" "$OUT/serve_$name.log" | tail -2
}
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  echo "== concurrent streamed requests (~256-token prompts, 128 tokens, 2 per client), bundled model (${SECONDS}s)"
  for n in 8 32; do
    load "bundled_gpu_$n" "$M" "$n" --device cuda --kv-type f16 --kv-store-type active --max-num-seqs "$n" --kv-pool-mb 4096
  done
  load "bundled_cpu_8" "$M" 8 --device cpu --kv-type f16 --kv-store-type active --max-num-seqs 8 --kv-pool-mb 4096
fi
if [ "${SKIP_QWEN:-0}" != 1 ]; then
  echo "== Qwen3-0.6B-shaped q8_0 (make-test-model) (${SECONDS}s)"
  "$K" make-test-model --out /tmp/q3.gguf --weight-type q8_0 --text-fillers 2>&1 | tail -1
  for n in 8 32; do
    SERVE_ENV=KVTIER_CUDA_STEP_STATS=1 load "qwen3_gpu_$n" /tmp/q3.gguf "$n" --device cuda --kv-type f16 --kv-store-type active --max-num-seqs "$n" \
      --kv-pool-mb 16384 --max-model-len 4096
  done
  if [ "${EXTRA:-0}" = 1 ]; then
  echo "-- 32 clients with the default --kv-store-type (rot4s0: each store quantized on the scheduler thread)"
  load "qwen3_gpu_32_rot4store" /tmp/q3.gguf 32 --device cuda --kv-type f16 --max-num-seqs 32 \
    --kv-pool-mb 16384 --max-model-len 4096
  echo "-- the same, 32 clients, every call through the matvec (KVTIER_CUDA_GEMM_MIN=1000000)"
  SERVE_ENV=KVTIER_CUDA_GEMM_MIN=1000000 load "qwen3_gpu_32_matvec" /tmp/q3.gguf 32 --device cuda \
    --kv-type f16 --kv-store-type active --max-num-seqs 32 --kv-pool-mb 16384 --max-model-len 4096
  fi
  echo "-- one sequence, an 87-token prompt then 64 tokens: cuBLAS from 16 tokens (default) vs matvec only"
  for g in 16 1000000; do
    echo "gemm_min $g: $(KVTIER_CUDA_GEMM_MIN=$g "$K" generate --model /tmp/q3.gguf \
      --prompt "Hello there, how are you today? It is a fine morning and the sun is out over the hills." \
      --max-tokens 64 --temperature 0 --device cuda --stats 2>&1 >/dev/null | tail -2 | tr '\n' ' ')"
  done
fi
if [ "${SKIP_TTFT:-0}" != 1 ]; then
  for C in ${TTFT_CHARS:-16000 125000 125000p}; do
    SERVE_ENV=""
    if [ "${C%p}" != "$C" ]; then  # the host pool left pageable, for comparison
      C=${C%p}
      SERVE_ENV=KVTIER_CUDA_PIN_HOST=0
      echo "-- host pool pageable (KVTIER_CUDA_PIN_HOST=0)"
    fi
    echo "== TTFT, a $C-character prompt, bundled model on the GPU: cold, then from the host-RAM tier (${SECONDS}s)"
    if serve_start "serve_ttft_$C" "$M" --device cuda --kv-type f16 --kv-store-type active \
        --max-model-len 40000 --kv-pool-mb 8192 --prefill-step-size 2048; then
      timeout 400 python3 "$P/serve_load.py" ttft http://127.0.0.1:8393 "$P/eval.txt" "$C" 2>&1
    fi
    serve_stop
    SERVE_ENV=""
    grep -E "device=|cache_fetch" "$OUT/serve_ttft_$C.log" | tail -3
  done
fi
echo "== done (${SECONDS}s), rc $rc"
exit $rc
