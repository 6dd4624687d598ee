#!/usr/bin/env bash
# Builds kvtier and runs every test: the release build (g++), a clang-14 -Werror compile of
# everything (a compile check), the unit tests again under AddressSanitizer +
# UndefinedBehaviorSanitizer, and the concurrent tests (thread pool, Env, prefix cache, SSD
# tier) under ThreadSanitizer.
# Installs what it needs first (tools/setup.sh). Environment knobs:
#   KVTIER_SKIP_SANITIZERS=1  skip the ASan+UBSan build
#   KVTIER_SKIP_CLANG=1       skip the clang build
#   KVTIER_SKIP_TSAN=1        skip the ThreadSanitizer build of the concurrent tests
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
JOBS=${JOBS:-$(nproc)}

echo "== release build (g++) and tests (${SECONDS}s)"
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C build/release
(cd build/release && ctest --output-on-failure -j"$JOBS")

if [ "${KVTIER_SKIP_CLANG:-0}" != 1 ]; then
  echo "== clang-14 build (-Wall -Wextra -Werror) of everything (${SECONDS}s)"
  # A compile check: clang's warnings come from its front end (parsing, semantic analysis and
  # template instantiation), so -fsyntax-only finds the same ones without code generation
  # (about 45% less time per file here) and nothing is linked; the tests already ran on the
  # g++ build above and run again under ASan below. The rules touch the outputs so that ninja
  # sees them made; the depfiles are still written, so edits rebuild what they should.
  CC=clang-14 CXX=clang++-14 cmake -S . -B build/clang -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_CXX_FLAGS_DEBUG="-O0" -DKVTIER_BUILD_BENCH=OFF -DKVTIER_CUDA=OFF \
    "-DCMAKE_CXX_COMPILE_OBJECT=<CMAKE_CXX_COMPILER> <DEFINES> <INCLUDES> <FLAGS> -fsyntax-only <SOURCE> && touch <OBJECT>" \
    "-DCMAKE_CXX_CREATE_STATIC_LIBRARY=touch <TARGET>" \
    "-DCMAKE_CXX_LINK_EXECUTABLE=touch <TARGET>" >/dev/null
  ninja -C build/clang
fi

if [ "${KVTIER_SKIP_SANITIZERS:-0}" != 1 ]; then
  echo "== ASan + UBSan build and tests (${SECONDS}s)"
  # The libraries and their tests (the kvtier command's front end, mostly CLI11 templates, is
  # left out: its tests ran on the release build).
  # SIMD kernels compile for the best target this CPU runs (AVX-512, else AVX2) and the
  # portable fallback here (the release build covers every target): the instrumented kernels
  # are what makes this build slow, and code for a target the CPU lacks could not run anyway
  # (on an AVX2-only CPU the whole suite would fall back to the portable code, slow enough
  # under ASan to time out the server's shutdown test). 6656 = HWY_AVX2 | HWY_SSE4 |
  # HWY_SSSE3, 6400 = HWY_AVX3 | HWY_SSE4 | HWY_SSSE3 (hwy/detect_targets.h), as numbers so
  # no shell sees "|". -g1: line tables for the sanitizers' stack traces, without full debug
  # info.
  # Likewise the int8 attention path (AVX-512 VNNI) is left out where the CPU lacks VNNI.
  asan_off=6400
  if grep -qw avx512bw /proc/cpuinfo; then asan_off=6656; fi
  asan_int8=OFF
  if grep -qw avx512_vnni /proc/cpuinfo; then asan_int8=ON; fi
  cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
    -DCMAKE_CXX_FLAGS="-DHWY_DISABLED_TARGETS=$asan_off" -DKVTIER_INT8_KERNELS=$asan_int8 \
    -DKVTIER_SANITIZE=ON -DKVTIER_BUILD_BENCH=OFF -DKVTIER_BUILD_CLI=OFF -DKVTIER_CUDA=OFF >/dev/null
  ninja -C build/asan
  (cd build/asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j"$JOBS")
fi

if [ "${KVTIER_SKIP_TSAN:-0}" != 1 ]; then
  echo "== ThreadSanitizer build and tests of the shared structures (${SECONDS}s)"
  # Locking, not SIMD, is under test here: kernels compile for AVX2 and scalar only
  # (6400 = HWY_AVX3 | HWY_SSE4 | HWY_SSSE3).
  cmake -S . -B build/tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
    -DCMAKE_CXX_FLAGS="-DHWY_DISABLED_TARGETS=6400" \
    -DKVTIER_TSAN=ON -DKVTIER_BUILD_BENCH=OFF -DKVTIER_CUDA=OFF >/dev/null
  ninja -C build/tsan kvtier_prefix_test kvtier_base_test kvtier_env_test kvtier_tier_test \
    kvtier_remote_test
  # The tests that share structures between threads (the property test is single-threaded).
  export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
  build/tsan/src/base/kvtier_base_test --gtest_filter='ThreadPool*'
  build/tsan/src/base/kvtier_env_test --gtest_filter='EnvConcurrency*'
  build/tsan/src/prefix/kvtier_prefix_test --gtest_filter='PrefixCacheTest.*:PrefixHottestTest.Concurrent*'
  build/tsan/src/tier/kvtier_tier_test --gtest_filter='SsdTier.*:SsdTierBatch.*:SsdTierSegment.*:SsdTierIds.*'
  build/tsan/src/remote/kvtier_remote_test  # writer, read-ahead workers, cluster fan-out
fi
echo "== all tests passed (${SECONDS}s)"
