#!/bin/bash
# The KV-format quality table of docs/results/kv-cache.md for one model: `kvtier perplexity
# --kld` per format (f16 base and the format in one run), then llama.cpp's llama-perplexity
# with f16 KV (--kl-divergence-base) and with -ctk/-ctv T (--kl-divergence; its Hadamard
# rotation is on by default for quantized K/V when head_dim % 64 == 0).
# Usage: tools/kv_quality.sh MODEL.gguf CTX CHUNKS [kvtier formats] [llama types]
set -euo pipefail
M=$1; C=$2; N=$3
FORMATS=${4:-f16,q8_0,q4_0,affine4g64,rot4s0,rot3s0,rot2s0}
LTYPES=${5:-q8_0,q4_0}
KV=${KVTIER:-build/release/src/cli/kvtier}
LP=${LLAMA_PERPLEXITY:-/work/llama/build/bin/llama-perplexity}
TEXT=${TEXT:-data/corpus/eval.txt}
echo "| $(basename "$M") ctx $C, $N windows | PPL | ΔPPL vs f16 | mean KLD | 99% KLD | same top-1 |"
echo "|---|---|---|---|---|---|"
for f in ${FORMATS//,/ }; do
  "$KV" perplexity --model "$M" --file "$TEXT" --ctx "$C" --chunks "$N" --kv-type "$f" --kld \
    --json --threads 2 2>/dev/null | tail -1 | python3 -c "
import json, sys; j = json.load(sys.stdin)
print('| kvtier \`$f\` | %.3f | %+.3f%% | %.5f | %.4f | %.2f%% |' % (j['ppl'],
    100 * (j['ppl'] / j['ppl_base'] - 1), j['kld'], j['kld_p99'], 100 * j['same_top1']))"
done
[ -x "$LP" ] || exit 0
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
"$LP" -m "$M" -f "$TEXT" -c "$C" -b "$C" --chunks "$N" -fa on -t 2 \
  --kl-divergence-base "$W/base.kld" > "$W/base.log" 2>&1
BASE=$(grep -o "Final estimate: PPL = [0-9.]*" "$W/base.log" | awk '{print $NF}')
echo "| llama.cpp \`f16\` | $BASE | +0.000% | 0 | 0 | 100% |"
for t in ${LTYPES//,/ }; do
  "$LP" -m "$M" -f "$TEXT" -c "$C" -b "$C" --chunks "$N" -fa on -t 2 -ctk "$t" -ctv "$t" \
    --kl-divergence-base "$W/base.kld" --kl-divergence > "$W/$t.log" 2>&1
  python3 - "$W/$t.log" "$BASE" "$t" <<'PY'
import re, sys
log, base, t = open(sys.argv[1]).read(), float(sys.argv[2]), sys.argv[3]
ppl = float(re.search(r"Mean PPL\(Q\)\s*:\s*([0-9.]+)", log).group(1))
kld = float(re.search(r"Mean\s+KLD:\s*([0-9.]+)", log).group(1))
p99 = float(re.search(r"99\.0%\s+KLD:\s*([0-9.]+)", log).group(1))
top = float(re.search(r"Same top p:\s*([0-9.]+)", log).group(1))
print(f"| llama.cpp `{t}` (rotated) | {ppl:.3f} | {100 * (ppl / base - 1):+.3f}% | {kld:.5f} | {p99:.4f} | {top:.2f}% |")
PY
done
