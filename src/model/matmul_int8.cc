// The int8 matmul driver (see matmul_int8.h): ISA detection, the kernel lookup, and the loop
// that quantizes a call's activations once and runs R-row x T-token tiles over the pool.
// Stateless apart from the calling thread's activation buffer (thread_local); thread-safe.
#include "model/matmul_int8.h"

#include <algorithm>
#include <vector>

#include "kvtier/thread_pool.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define KVTIER_MATMUL_X86 1
#else
#define KVTIER_MATMUL_X86 0
#endif

namespace kvtier::model::int8 {

namespace {

#if KVTIER_MATMUL_X86
Isa Detect() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return Isa::kScalar;
  const bool osxsave = c & (1u << 27), fma = c & (1u << 12), f16c = c & (1u << 29);
  if (!osxsave || !fma || !f16c) return Isa::kScalar;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 0x6) != 0x6) return Isa::kScalar;  // the OS saves xmm and ymm state
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return Isa::kScalar;
  if (!(b & (1u << 5))) return Isa::kScalar;  // AVX2
  const unsigned avx512 = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);  // F DQ BW VL
  const bool zmm_state = (lo & 0xE6) == 0xE6;  // and opmask and zmm state
  if (zmm_state && (b & avx512) == avx512 && (c & (1u << 11))) return Isa::kAvx512Vnni;
  return Isa::kAvx2;
}
#else
Isa Detect() { return Isa::kScalar; }
#endif

constexpr size_t kRowGroup = 16;  // weight rows per prefill work item
constexpr size_t kTokBlock = 64;  // tokens per prefill work item (activations stay in L2)
// Decode streams the weights from DRAM: each row tile software-prefetches the tile about
// kPrefetchBytes ahead (measured on the lm head, 1024x151936, one thread, Zen 5: 4-16 KB
// ahead gives 1.1-1.25x the read floor where the next tile (1.3-5 KB) gave 1.2-1.8x and
// no software prefetch 3.2x for q4_0).
constexpr bool kPrefetch = true;
constexpr size_t kPrefetchBytes = 10 << 10;

}  // namespace

Isa DetectIsa() {
  static const Isa isa = Detect();
  return isa;
}

const Int8Kernels* FindInt8Kernels(uint32_t ggml_type, Isa isa) {
  if (static_cast<int>(isa) > static_cast<int>(DetectIsa())) return nullptr;
  switch (isa) {
    case Isa::kAvx512Vnni: {
      const Int8Kernels* k = Int8KernelsAvx512(ggml_type);
      return k != nullptr ? k : Int8KernelsAvx512KQuant(ggml_type);
    }
    case Isa::kAvx2: {
      const Int8Kernels* k = Int8KernelsAvx2(ggml_type);
      return k != nullptr ? k : Int8KernelsAvx2KQuant(ggml_type);
    }
    default: {
      const Int8Kernels* k = Int8KernelsRef(ggml_type);
      return k != nullptr ? k : Int8KernelsRefKQuant(ggml_type);
    }
  }
}

void RunInt8(const Int8Kernels& k, const WeightMatrix& w, const float* x, size_t n_tok,
             float* y, ThreadPool* pool) {
  const size_t K = w.n_in, n_out = w.n_out;
  const size_t stride = k.act_bytes(K);
  thread_local std::vector<uint8_t> buf;
  if (buf.size() < n_tok * stride + 64) buf.resize(n_tok * stride + 64);
  auto* act = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) &
                                         ~uintptr_t{63});  // [n_tok][stride]
  auto quantize = [&](size_t t0, size_t t1) {
    for (size_t t = t0; t < t1; ++t) k.quantize(x + t * K, K, act + t * stride);
  };
  if (pool != nullptr && n_tok >= 16) {
    pool->ParallelFor(n_tok, 0, quantize);
  } else {
    quantize(0, n_tok);
  }
  const size_t R = k.tile_rows, T = k.tile_tok;
  // Rows [o0, o1) x tokens [t0, t1) in R x T tiles.
  const size_t tile_bytes = R * w.row_bytes;
  const size_t pf_rows = R * std::max<size_t>(1, (kPrefetchBytes + tile_bytes / 2) / tile_bytes);
  auto block = [&](size_t o0, size_t o1, size_t t0, size_t t1) {
    const uint8_t* rows[8];
    for (size_t o = o0; o < o1; o += R) {
      const size_t nr = std::min(R, o1 - o);
      if (kPrefetch && o + pf_rows < o1) {  // the tile pf_rows ahead, while this one runs
        const uint8_t* next = w.data + (o + pf_rows) * w.row_bytes;
        const size_t n = std::min(R, o1 - o - pf_rows) * w.row_bytes;
        for (size_t b = 0; b < n; b += 64) __builtin_prefetch(next + b);
      }
      for (size_t r = 0; r < R; ++r) rows[r] = w.data + (o + (r < nr ? r : 0)) * w.row_bytes;
      for (size_t t = t0; t < t1; t += T) {
        k.tile(rows, nr, act + t * stride, stride, std::min(T, t1 - t), K, y + t * n_out + o,
               n_out);
      }
    }
  };
  if (n_tok <= 2 * T) {  // decode: row tiles over the pool, every token at once
    const size_t n_groups = (n_out + R - 1) / R;
    auto run = [&](size_t g0, size_t g1) { block(g0 * R, std::min(n_out, g1 * R), 0, n_tok); };
    if (pool != nullptr) {
      pool->ParallelFor(n_groups, 0, run);
    } else {
      run(0, n_groups);
    }
    return;
  }
  // Prefill: (token block, row group) items, token-block major, so that a thread's
  // consecutive items reuse one block of activations from cache.
  const size_t n_groups = (n_out + kRowGroup - 1) / kRowGroup;
  const size_t n_blocks = (n_tok + kTokBlock - 1) / kTokBlock;
  auto run = [&](size_t i0, size_t i1) {
    for (size_t item = i0; item < i1; ++item) {
      const size_t tb = item / n_groups, g = item % n_groups;
      block(g * kRowGroup, std::min(n_out, (g + 1) * kRowGroup), tb * kTokBlock,
            std::min(n_tok, (tb + 1) * kTokBlock));
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(n_blocks * n_groups, 0, run);
  } else {
    run(0, n_blocks * n_groups);
  }
}

}  // namespace kvtier::model::int8
