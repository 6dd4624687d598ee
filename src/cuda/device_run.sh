#!/usr/bin/env bash
# One GPU-machine call: build src/cuda on its own (the standalone configuration, no CPU-build
# dependencies), run the `cuda` tests, the PyTorch SDPA baseline and kvtier_cuda_bench, all in
# the same call (same card). Run from a tree holding include/, src/ and a googletest source
# tree at ./googletest (src/cuda/pack_device.sh makes that tree). Logs go to $OUT.
#   BENCH_ARGS="..."  extra kvtier_cuda_bench flags;  SKIP_BENCH=1 / SKIP_TESTS=1 /
#   SKIP_DECODE_TESTS=1 (forward-pass tests only, ~100 s less); TEST_ARGS="--gtest_filter=..."
#   for the decode tests;
#   SWEEP="flags;flags" one more bench run per flag set; PER_HEAD=0 skips the per-head run;
#   CLEAN=1 both benchmarks again with a clean-line L2 flush; MATVEC=1 kvtier_cuda_bench --matvec
#   (MATVEC_ARGS: its flags)
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv
nvcc --version | tail -2
echo "== build (${SECONDS}s)"
cmake -S src/cuda -B build/cuda -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGTEST_SOURCE_DIR="$PWD/googletest" -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHS:-90-real}" \
  -DCMAKE_CUDA_FLAGS="--resource-usage" > /tmp/cmake.log 2>&1 || { tail -30 /tmp/cmake.log; exit 1; }
ninja -C build/cuda -j"$(nproc)" kvtier_cuda_test kvtier_cuda_bench > "$OUT/build.log" 2>&1 \
  || { grep -B2 -A12 "error" "$OUT/build.log" | head -80; exit 1; }
# The forward-pass tests on their own: a link error there does not stop the decode runs.
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  ninja -C build/cuda -j"$(nproc)" kvtier_cuda_forward_test >> "$OUT/build.log" 2>&1 \
    || { echo "kvtier_cuda_forward_test: build failed"; grep -A3 "error" "$OUT/build.log" | head -12; }
fi
# Registers and spills of the decode kernels (ptxas --resource-usage).
grep -A1 "Function properties for .*Decode\(Wide\|Mma\)Kernel" "$OUT/build.log" | grep -o "_Z[^ ]*\|[0-9]* bytes spill stores" | paste - - | sort -u | head -40 || true
grep -E "ptxas info *: Used [0-9]+ registers" "$OUT/build.log" | sort | uniq -c | sort -rn | head -12 || true
echo "== tests (${SECONDS}s)"
rc=0
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  if [ "${SKIP_DECODE_TESTS:-0}" != 1 ]; then
    build/cuda/kvtier_cuda_test ${TEST_ARGS:-} 2>&1 | tee "$OUT/test.log" | grep -v "^\[ RUN\|^\[       OK" || true
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  fi
  if [ "${SKIP_FORWARD_TESTS:-0}" != 1 ] && [ -x build/cuda/kvtier_cuda_forward_test ]; then
    build/cuda/kvtier_cuda_forward_test 2>&1 | tee "$OUT/forward_test.log" | grep -v "^\[ RUN\|^\[       OK" || true
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  fi
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  # REPEAT=n: SDPA and kvtier_cuda_bench n times in turn (SDPA's times move between runs).
  for rep in $(seq 1 "${REPEAT:-1}"); do
    sfx=$([ "$rep" = 1 ] && echo "" || echo "_$rep")
    echo "== PyTorch SDPA bf16 baseline, run $rep (${SECONDS}s)"
    PYTHONUNBUFFERED=1 python3 src/cuda/sdpa_bench.py > "$OUT/sdpa$sfx.csv" 2> "$OUT/sdpa$sfx.log"
    cat "$OUT/sdpa$sfx.log"
    echo "== kvtier_cuda_bench, run $rep (${SECONDS}s)"
    build/cuda/kvtier_cuda_bench --sdpa "$OUT/sdpa$sfx.csv" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench$sfx.txt"
  done
  if [ "${CLEAN:-0}" = 1 ]; then
    # The same with an L2 flush that leaves clean lines (fill, then read back) on both sides.
    echo "== SDPA and kvtier_cuda_bench, clean-line L2 flush (${SECONDS}s)"
    PYTHONUNBUFFERED=1 python3 src/cuda/sdpa_bench.py --clean-flush > "$OUT/sdpa_clean.csv" 2> "$OUT/sdpa_clean.log"
    cat "$OUT/sdpa_clean.log"
    build/cuda/kvtier_cuda_bench --sdpa "$OUT/sdpa_clean.csv" --clean-flush ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_clean.txt"
  fi
  if [ "${PER_HEAD:-1}" = 1 ]; then
    echo "== the per-head tensor-core kernel (the first slice's), same card (${SECONDS}s)"
    build/cuda/kvtier_cuda_bench --sdpa "$OUT/sdpa.csv" --per-head ${BENCH_ARGS:-} 2>&1 \
      | tee "$OUT/bench_per_head.txt" | grep -E "^(bf16|f16|q8_0|q4_0|rot4s[0-9]+) "
  fi
  if [ "${EXTRA:-0}" = 1 ]; then
    echo "== bf16 with the blocks in order (not shuffled), for comparison (${SECONDS}s)"
    build/cuda/kvtier_cuda_bench --sdpa "$OUT/sdpa.csv" --sequential --formats bf16 \
      2>&1 | tail -6
    echo "== the f32 (exact) kernel at 32K, batch 32, for comparison (${SECONDS}s)"
    build/cuda/kvtier_cuda_bench --sdpa "$OUT/sdpa.csv" --exact --contexts 32768 --batches 32 \
      2>&1 | tee "$OUT/bench_exact.txt" | tail -4
  fi
fi
if [ "${MATVEC:-0}" = 1 ]; then
  echo "== forward-pass matvec / GEMM (${SECONDS}s)"
  build/cuda/kvtier_cuda_bench --matvec ${MATVEC_ARGS:-} 2>&1 | tee "$OUT/matvec.txt"
fi
if [ -n "${SWEEP:-}" ]; then
  # SWEEP="flags;flags;...": kvtier_cuda_bench once per flag set (e.g. "--hpc 2 --batches 1").
  echo "== sweep (${SECONDS}s)"
  IFS=';' read -ra sweeps <<< "$SWEEP"
  for a in "${sweeps[@]}"; do
    echo "-- $a"
    build/cuda/kvtier_cuda_bench --sdpa "$OUT/sdpa.csv" --formats "${SWEEP_FORMATS:-bf16,q8_0,q4_0}" \
      $a 2>&1 | grep -E "^(bf16|f16|q8_0|q4_0|rot4s[0-9]+) "
  done
fi
if [ "${VARIANTS:-0}" = 1 ]; then
  echo "== pipeline-depth variants of the tensor-core kernel (${SECONDS}s)"
  # Each item: KNOB=VALUE[+KNOB=VALUE...]:formats (knobs: decode_mma.cuh).
  for v in ${VARIANT_LIST:-WIDE_Q8_UNITS=2+WIDE_Q8_STAGES=3:q8_0 WIDE_Q8_STAGES=6:q8_0 WIDE_Q4_STAGES=4:q4_0 WIDE_Q4_UNITS=4:q4_0 WIDE_PLAIN_STAGES=2:bf16}; do
    def=${v%%:*}; fmts=${v##*:}; dir=build/v_${def//[+=]/_}
    flags=$(echo "$def" | tr '+' '\n' | sed 's/^/-DKVTIER_CUDA_/' | tr '\n' ' ')
    cmake -S src/cuda -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVTIER_BUILD_TESTS=OFF \
      -DCMAKE_CUDA_ARCHITECTURES=90-real -DCMAKE_CUDA_FLAGS="$flags" >/dev/null 2>&1 &&
      ninja -C "$dir" -j"$(nproc)" kvtier_cuda_bench >/dev/null 2>&1 || { echo "variant $def: build failed"; continue; }
    echo "-- KVTIER_CUDA_${def}"
    "$dir/kvtier_cuda_bench" --sdpa "$OUT/sdpa.csv" --formats "$fmts" --contexts 32768,131072 \
      --batches "${VARIANT_BATCHES:-8,32}" 2>&1 | grep -E "^(bf16|q8_0|q4_0|rot4s[0-9]+) "
  done
fi
if [ "${NCU:-0}" = 1 ]; then
  echo "== Nsight Compute: the default tensor-core kernel at 32K, batch 32 (${SECONDS}s)"
  for f in ${NCU_FORMATS:-q4_0 bf16}; do
    ncu --kernel-name regex:Decode --launch-skip 3 --launch-count 1 --section SpeedOfLight \
      --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats \
      --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
      build/cuda/kvtier_cuda_bench --formats "$f" --contexts 32768 --batches 32 --iters 1 \
      >> "$OUT/ncu.txt" 2>&1
  done
  grep -E "Decode(Mma|Wide)|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Executed Ipc A|L1/TEX Hit|Mem Busy|Max Bandwidth|Stall" "$OUT/ncu.txt" | head -80
fi
echo "== done (${SECONDS}s), tests rc $rc"
exit $rc
