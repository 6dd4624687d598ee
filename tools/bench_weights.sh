#!/bin/bash
# End-to-end weight-type speed against llama.cpp (issue 30): for each GGUF file, alternating
# kvtier / llama.cpp runs (same file, 2 threads, f16 KV, depth 1024, 512-token prefill, 32
# decode tokens), ROUNDS rounds, then the median tokens/s of each and the ratio.
#   usage: tools/bench_weights.sh [ROUNDS] [FILE.gguf ...]
#   env:   KVTIER_BENCH (kvtier-bench binary), LLAMA_BENCH (llama-bench binary),
#          THREADS (2), EXTRA (more kvtier-bench model flags, e.g. "--matmul int8-avx512-tiles");
#          KVTIER_GEMM_F16=f32 passes through: the f16 prefill GEMM's exact f32 form instead of
#          its int16 block codes (for an old / new side-by-side on the f16 file)
# Defaults: 3 rounds; the six Qwen3-0.6B-shaped files of the issue in /work/scratch_matmul
# (make-test-model --weight-type q8_0 / q4_0 / f16; llama-quantize Q4_K_M / IQ4_XS; bf16).
# Run it on an idle machine: both programs are timed by wall clock.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
shift || true
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  d=/work/scratch_matmul
  files=("$d/qwen3-q8_0.gguf" "$d/qwen3-q4_0.gguf" "$d/qwen3-f16.gguf" "$d/kv-bf16.gguf"
         "$d/kv-Q4_K_M.gguf" "$d/kv-IQ4_XS.gguf")
fi
K=${KVTIER_BENCH:-build/release/src/cli/kvtier-bench}
L=${LLAMA_BENCH:-/work/llama/build/bin/llama-bench}
T=${THREADS:-2}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "# $(date -u '+%F %H:%M') UTC, $(git rev-parse --short HEAD), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
  for f in "${files[@]}"; do
    n=$(basename "$f" .gguf)
    # kvtier: the f16 row of the table: kv depth prefill decode ...
    k=$("$K" model --model "$f" --depth 1024 --kv-type f16 --prefill 512 --decode 32 \
          --repeats 1 --threads "$T" ${EXTRA:-} 2>&1 | awk '$1 == "f16" {print $3, $4}')
    # llama-bench csv: avg_ts is the second last column; rows pp512 then tg32
    l=$("$L" -m "$f" -p 512 -n 32 -d 1024 -fa 1 -t "$T" -r 1 -o csv 2>/dev/null |
          tail -2 | awk -F, '{gsub(/"/, "", $(NF-1)); printf "%s ", $(NF-1)}')
    echo "$n $r $k $l" | tee -a "$out" >&2
  done
done
echo "| file | kvtier prefill | llama.cpp pp512 | ratio | kvtier decode | llama.cpp tg32 | ratio |"
echo "|---|---|---|---|---|---|---|"
for f in "${files[@]}"; do
  n=$(basename "$f" .gguf)
  awk -v n="$n" '
    function med(a, c,   i, j, t) {
      for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return c % 2 ? a[(c + 1) / 2] : (a[c / 2] + a[c / 2 + 1]) / 2
    }
    $1 == n { c++; kp[c] = $3; kd[c] = $4; lp[c] = $5; ld[c] = $6 }
    END {
      a = med(kp, c); b = med(lp, c); x = med(kd, c); y = med(ld, c)
      printf "| %s | %.1f | %.1f | %.2fx | %.1f | %.1f | %.2fx |\n", n, a, b, a / b, x, y, x / y
    }' "$out"
done
