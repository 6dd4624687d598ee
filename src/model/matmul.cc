// Weight-matrix products, compiled for every Highway target and dispatched at run time.
// See matmul.h for the two paths. Stateless; per-thread scratch is thread_local.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "model/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "kvtier/thread_pool.h"
#include "kvtier/quant.h"
#include "kvtier/weights.h"
#include "model/matmul.h"
#include "model/matmul_gemm.h"
#include "model/matmul_int8.h"
#include "quant/format_traits.h"
#include "quant/quant_simd.h"
#include "simd/reduce-inl.h"
#include "simd/scalar-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvtier::model::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

constexpr size_t kRowGroup = 16;  // weight rows decoded together into f32 (L2 resident)
constexpr size_t kTokBlock = 64;  // tokens per work item (their activations stay in cache)
constexpr size_t kKChunk = 1024;  // k per pass: 4 rows and 4 tokens of it (32 KiB) fit L1

// Grows a thread's scratch to at least n floats (64-byte aligned).
float* Scratch(std::vector<float>& v, size_t n) {
  if (v.size() < n + 16) v.resize(n + 16);
  auto p = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<float*>((p + 63) & ~uintptr_t{63});
}

// Weight decoders: a block of kBlock values at kBytes bytes (kBlock 0: plain values, no
// scale), decoded N lanes at a time straight into registers.
struct WF32 {  // plain f32 (also the tiled path's decoded rows): the only one with a k tail
  static constexpr size_t kBlock = 0, kBytes = 0;
  static HWY_INLINE VF Load(DF df, const uint8_t* b, size_t j) {
    return hn::LoadU(df, reinterpret_cast<const float*>(b) + j);
  }
};
struct WQ8_0 {  // fp16 scale, 32 int8
  static constexpr size_t kBlock = Q8_0Traits::kBlockValues, kBytes = Q8_0Traits::kBlockBytes;
  static HWY_INLINE VF Scale(const uint8_t* b) { return kvtier::HWY_NAMESPACE::BroadcastHalf(b); }
  static HWY_INLINE VF Load(DF df, const uint8_t* b, size_t j) {
    const hn::RebindToSigned<DF> di;
    const hn::Rebind<int8_t, DF> d8;
    return hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const int8_t*>(
                                                                 b + 2 + j))));
  }
};
struct WQ4_0 {  // fp16 scale, 16 bytes: value i in the low nibble of byte i, i + 16 in the high
  static constexpr size_t kBlock = Q4_0Traits::kBlockValues, kBytes = Q4_0Traits::kBlockBytes;
  static HWY_INLINE VF Scale(const uint8_t* b) { return kvtier::HWY_NAMESPACE::BroadcastHalf(b); }
  static HWY_INLINE VF Load(DF df, const uint8_t* b, size_t j) {
    const hn::RebindToSigned<DF> di;
    const hn::Rebind<uint8_t, DF> d8;
    const auto bytes = hn::BitCast(di, hn::PromoteTo(hn::RebindToUnsigned<DF>(),
                                                     hn::LoadU(d8, b + 2 + (j & 15))));
    const auto q = j < 16 ? hn::And(bytes, hn::Set(di, 15)) : hn::ShiftRight<4>(bytes);
    return hn::ConvertTo(df, hn::Sub(q, hn::Set(di, 8)));
  }
};
struct WF16 {  // plain f16: one "block" per vector, no scale
  static constexpr size_t kBlock = 0, kBytes = 0;
  static HWY_INLINE VF Load(DF df, const uint8_t* b, size_t j) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(b) + j));
  }
};
struct WBF16 {
  static constexpr size_t kBlock = 0, kBytes = 0;
  static HWY_INLINE VF Load(DF df, const uint8_t* b, size_t j) {
    const hn::RebindToUnsigned<DF> du;
    const hn::Rebind<uint16_t, DF> d16;
    const auto bits = hn::PromoteTo(du, hn::LoadU(d16, reinterpret_cast<const uint16_t*>(b) + j));
    return hn::BitCast(df, hn::ShiftLeft<16>(bits));
  }
};

// y[t][r] (+)= dot(w[r][k0:k1], x[t][k0:k1]) for four weight rows (pointers; a missing row
// repeats row 0) and NT <= 4 tokens: 4 * NT accumulators in registers, reduced together at
// the end; `accumulate` adds to y instead of storing. k0, k1 are whole blocks (plain types:
// any k1, the tail past the last whole vector done in scalar code).
//   x [NT][K] f32, y rows n_out apart (nr <= 4 valid columns)
template <class W, size_t NT>
HWY_NOINLINE void RowTile(const uint8_t* const* w, const float* HWY_RESTRICT x, size_t K,
                          size_t k0, size_t k1, float* HWY_RESTRICT y, size_t n_out, size_t nr,
                          bool accumulate) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const VF z = hn::Zero(df);
  VF a00 = z, a01 = z, a02 = z, a03 = z, a10 = z, a11 = z, a12 = z, a13 = z;
  VF a20 = z, a21 = z, a22 = z, a23 = z, a30 = z, a31 = z, a32 = z, a33 = z;
  auto step = [&](const VF w0, const VF w1, const VF w2, const VF w3, size_t k) HWY_ATTR {
    const VF x0 = hn::LoadU(df, x + k);
    a00 = hn::MulAdd(w0, x0, a00);
    a10 = hn::MulAdd(w1, x0, a10);
    a20 = hn::MulAdd(w2, x0, a20);
    a30 = hn::MulAdd(w3, x0, a30);
    if constexpr (NT > 1) {
      const VF x1 = hn::LoadU(df, x + K + k);
      a01 = hn::MulAdd(w0, x1, a01);
      a11 = hn::MulAdd(w1, x1, a11);
      a21 = hn::MulAdd(w2, x1, a21);
      a31 = hn::MulAdd(w3, x1, a31);
    }
    if constexpr (NT > 2) {
      const VF x2 = hn::LoadU(df, x + 2 * K + k);
      a02 = hn::MulAdd(w0, x2, a02);
      a12 = hn::MulAdd(w1, x2, a12);
      a22 = hn::MulAdd(w2, x2, a22);
      a32 = hn::MulAdd(w3, x2, a32);
    }
    if constexpr (NT > 3) {
      const VF x3 = hn::LoadU(df, x + 3 * K + k);
      a03 = hn::MulAdd(w0, x3, a03);
      a13 = hn::MulAdd(w1, x3, a13);
      a23 = hn::MulAdd(w2, x3, a23);
      a33 = hn::MulAdd(w3, x3, a33);
    }
  };
  size_t k = k0;
  if constexpr (W::kBlock > 0) {
    for (size_t b = k0 / W::kBlock; b < k1 / W::kBlock; ++b) {
      const uint8_t* b0 = w[0] + b * W::kBytes;
      const uint8_t* b1 = w[1] + b * W::kBytes;
      const uint8_t* b2 = w[2] + b * W::kBytes;
      const uint8_t* b3 = w[3] + b * W::kBytes;
      const VF d0 = W::Scale(b0), d1 = W::Scale(b1), d2 = W::Scale(b2), d3 = W::Scale(b3);
      for (size_t j = 0; j < W::kBlock; j += N) {
        step(hn::Mul(W::Load(df, b0, j), d0), hn::Mul(W::Load(df, b1, j), d1),
             hn::Mul(W::Load(df, b2, j), d2), hn::Mul(W::Load(df, b3, j), d3),
             b * W::kBlock + j);
      }
    }
    k = k1;
  } else {
    for (; k + N <= k1; k += N) {
      step(W::Load(df, w[0], k), W::Load(df, w[1], k), W::Load(df, w[2], k),
           W::Load(df, w[3], k), k);
    }
  }
  const VF acc[16] = {a00, a01, a02, a03, a10, a11, a12, a13,
                      a20, a21, a22, a23, a30, a31, a32, a33};
  HWY_ALIGN float sums[16];  // [row][token]
  if (N == 16) {
    hn::Store(kvtier::HWY_NAMESPACE::SumBatch(df, acc), df, sums);
  } else {
    for (size_t i = 0; i < 16; ++i) sums[i] = hn::GetLane(hn::SumOfLanes(df, acc[i]));
  }
  if constexpr (std::is_same_v<W, WF32>) {
    for (; k < k1; ++k) {  // a tail shorter than a vector
      for (size_t r = 0; r < 4; ++r) {
        const float wk = reinterpret_cast<const float*>(w[r])[k];
        for (size_t t = 0; t < NT; ++t) sums[r * 4 + t] += wk * x[t * K + k];
      }
    }
  }
  for (size_t t = 0; t < NT; ++t) {
    for (size_t r = 0; r < nr; ++r) {
      y[t * n_out + r] = accumulate ? y[t * n_out + r] + sums[r * 4 + t] : sums[r * 4 + t];
    }
  }
}

template <class W>
void RunRowTile(size_t nt, const uint8_t* const* w, const float* x, size_t K, size_t k0,
                size_t k1, float* y, size_t n_out, size_t nr, bool accumulate) {
  switch (nt) {
    case 4: return RowTile<W, 4>(w, x, K, k0, k1, y, n_out, nr, accumulate);
    case 3: return RowTile<W, 3>(w, x, K, k0, k1, y, n_out, nr, accumulate);
    case 2: return RowTile<W, 2>(w, x, K, k0, k1, y, n_out, nr, accumulate);
    default: return RowTile<W, 1>(w, x, K, k0, k1, y, n_out, nr, accumulate);
  }
}

template <class W>
void DecodePath(const WeightMatrix& w, const float* x, size_t n_tok, float* y,
                ThreadPool* pool) {
  const size_t n_groups = (w.n_out + 3) / 4;
  auto run = [&](size_t g0, size_t g1) {
    for (size_t g = g0; g < g1; ++g) {
      const size_t o0 = g * 4, nr = std::min<size_t>(4, w.n_out - o0);
      const uint8_t* rows[4];
      for (size_t r = 0; r < 4; ++r) rows[r] = w.data + (o0 + (r < nr ? r : 0)) * w.row_bytes;
      if (g + 1 < g1) {  // the next group's rows, while this one runs (decode streams DRAM)
        const uint8_t* next = w.data + (o0 + 4) * w.row_bytes;
        const size_t n = std::min<size_t>(4, w.n_out - o0 - 4) * w.row_bytes;
        for (size_t b = 0; b < n; b += 64) __builtin_prefetch(next + b);
      }
      RunRowTile<W>(n_tok, rows, x, w.n_in, 0, w.n_in, y + o0, w.n_out, nr, false);
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(n_groups, 0, run);
  } else {
    run(0, n_groups);
  }
}

// The fused few-token path, when the type has one; false: use the tiled path.
bool TryDecodePath(const WeightMatrix& w, const float* x, size_t n_tok, float* y,
                   ThreadPool* pool) {
  const size_t N = hn::Lanes(DF());
  if (n_tok > 4 || N > 16 || w.n_in % N != 0) return false;
  switch (static_cast<GgmlType>(w.type)) {
    case GgmlType::kF32: DecodePath<WF32>(w, x, n_tok, y, pool); return true;
    case GgmlType::kQ8_0: DecodePath<WQ8_0>(w, x, n_tok, y, pool); return true;
    case GgmlType::kQ4_0: DecodePath<WQ4_0>(w, x, n_tok, y, pool); return true;
    case GgmlType::kF16: DecodePath<WF16>(w, x, n_tok, y, pool); return true;
    case GgmlType::kBF16: DecodePath<WBF16>(w, x, n_tok, y, pool); return true;
    default: return false;
  }
}

// Work items are (token block, group of kRowGroup weight rows), token-block major so that a
// thread's consecutive items reuse the same activations from cache. Each item decodes its
// rows once into f32 (row-major, K padded to whole vectors) and runs 4-row x 4-token tiles.
// f: the row Format of a src/quant type, nullopt for a src/weights type (decoded by w.type).
void MatMulImpl(const WeightMatrix& w, const std::optional<Format>& f, const float* x,
                size_t n_tok, float* y, ThreadPool* pool) {
  if (TryDecodePath(w, x, n_tok, y, pool)) return;
  const size_t K = w.n_in, n_out = w.n_out;
  const size_t n_groups = (n_out + kRowGroup - 1) / kRowGroup;
  const size_t n_blocks = (n_tok + kTokBlock - 1) / kTokBlock;
  auto run = [&](size_t i0, size_t i1) {
    thread_local std::vector<float> scratch;
    float* rows = Scratch(scratch, kRowGroup * K);  // [kRowGroup][K]
    for (size_t item = i0; item < i1; ++item) {
      const size_t tb = item / n_groups, g = item % n_groups;
      const size_t o0 = g * kRowGroup;
      const size_t nr = std::min(kRowGroup, n_out - o0);
      if (f.has_value()) {
        simd::DequantizeRowsStrided(*f, w.data + o0 * w.row_bytes, w.row_bytes, nr, K,
                                    DType::kF32, rows);
      } else {  // a src/weights type (q4_K, iq4_xs, ...): rows are contiguous
        (void)DequantizeWeightRows(w.type, w.data + o0 * w.row_bytes, nr, K, rows);
      }
      if (nr < kRowGroup) std::memset(rows + nr * K, 0, (kRowGroup - nr) * K * sizeof(float));
      const size_t t_end = std::min(n_tok, (tb + 1) * kTokBlock);
      // K in chunks whose slice of the row group stays in L1 across the token tiles.
      for (size_t k0 = 0; k0 < K; k0 += kKChunk) {
        const size_t k1 = std::min(K, k0 + kKChunk);
        for (size_t t = tb * kTokBlock; t < t_end; t += 4) {
          const size_t nt = std::min<size_t>(4, t_end - t);
          for (size_t r = 0; r < nr; r += 4) {
            const uint8_t* w4[4];  // rows r .. r + 3 of the decoded block
            for (size_t i = 0; i < 4; ++i) {
              w4[i] = reinterpret_cast<const uint8_t*>(rows + (r + i) * K);
            }
            RunRowTile<WF32>(nt, w4, x + t * K, K, k0, k1, y + t * n_out + o0 + r, n_out,
                             std::min<size_t>(4, nr - r), k0 > 0);
          }
        }
      }
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(n_blocks * n_groups, 0, run);
  } else {
    run(0, n_blocks * n_groups);
  }
}

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace kvtier::model::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvtier::model {

HWY_EXPORT(MatMulImpl);
HWY_EXPORT(TargetNameImpl);

}  // namespace kvtier::model

namespace kvtier {

Result<Format> WeightRowFormat(uint32_t ggml_type) {
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::kF32: return Format::F32();
    case GgmlType::kF16: return Format::F16();
    case GgmlType::kBF16: return Format::BF16();
    case GgmlType::kQ8_0: return Format::Q8_0();
    case GgmlType::kQ4_0: return Format::Q4_0();
    default:
      return Status::Unimplemented("weights of type " + GgmlTypeName(ggml_type) +
                                   " are not supported (supported: f32, f16, bf16, q8_0, q4_0)");
  }
}

}  // namespace kvtier

namespace kvtier::model {

// f: the src/quant row Format of w's type, or nullopt for a src/weights type.
static Status CheckMatrix(const WeightMatrix& w, std::optional<Format>* f) {
  Result<Format> rf = WeightRowFormat(w.type);
  if (rf.ok()) {
    *f = *rf;
  } else {
    f->reset();
  }
  KVTIER_ASSIGN_OR_RETURN(const size_t row_bytes, WeightRowBytes(w.type, w.n_in));
  if (w.row_bytes != row_bytes || w.data == nullptr) {
    return Status::InvalidArgument("weight matrix: row_bytes " + std::to_string(w.row_bytes) +
                                   " but " + std::to_string(row_bytes) + " expected for " +
                                   std::to_string(w.n_in) + " values of " +
                                   GgmlTypeName(w.type));
  }
  return Status::OK();
}

namespace {

std::atomic<MatMulPath> g_path{MatMulPath::kAuto};

// The int8 kernels MatMul uses for this type under the current path, or null (float).
const int8::Int8Kernels* Int8For(uint32_t type) {
  switch (g_path.load(std::memory_order_relaxed)) {
    case MatMulPath::kFloat: return nullptr;
    case MatMulPath::kInt8Scalar: return int8::FindInt8Kernels(type, int8::Isa::kScalar);
    case MatMulPath::kInt8Avx2: return int8::FindInt8Kernels(type, int8::Isa::kAvx2);
    case MatMulPath::kInt8Avx512:
    case MatMulPath::kInt8Avx512Tiles:
      return int8::FindInt8Kernels(type, int8::Isa::kAvx512Vnni);
    case MatMulPath::kAuto: break;
  }
  const int8::Isa best = int8::DetectIsa();
  if (best == int8::Isa::kScalar) return nullptr;  // the float path's SIMD is faster
  if (const auto* k = int8::FindInt8Kernels(type, best)) return k;
  return best == int8::Isa::kAvx512Vnni ? int8::FindInt8Kernels(type, int8::Isa::kAvx2) : nullptr;
}

// Prefill on AVX-512 VNNI: the unpack-once GEMM (matmul_gemm.h) instead of the int8 tiles.
bool UseGemm(uint32_t type, size_t n_tok) {
  const MatMulPath p = g_path.load(std::memory_order_relaxed);
  return n_tok >= int8::kGemmMinTokens &&
         (p == MatMulPath::kAuto || p == MatMulPath::kInt8Avx512) && int8::GemmSupports(type);
}

size_t GemmFloatMinTokens(uint32_t type) {
  return type == static_cast<uint32_t>(GgmlType::kF16) ? int8::kGemmF16MinTokens
                                                        : int8::kGemmMinTokens;
}

}  // namespace

Status MatMul(const WeightMatrix& w, const float* x, size_t n_tok, float* y, ThreadPool* pool) {
  std::optional<Format> f;
  KVTIER_RETURN_IF_ERROR(CheckMatrix(w, &f));
  if (n_tok == 0 || w.n_out == 0) return Status::OK();
  if (const int8::Int8Kernels* k = Int8For(w.type)) {
    if (UseGemm(w.type, n_tok)) {
      int8::RunGemm(w, x, n_tok, y, pool);
      return Status::OK();
    }
    int8::RunInt8(*k, w, x, n_tok, y, pool);
    return Status::OK();
  }
  if (n_tok >= GemmFloatMinTokens(w.type) &&
      g_path.load(std::memory_order_relaxed) == MatMulPath::kAuto &&
      int8::GemmFloatSupports(w.type, w.n_in)) {
    int8::RunGemmFloat(w, x, n_tok, y, pool);
    return Status::OK();
  }
  HWY_DYNAMIC_DISPATCH(MatMulImpl)(w, f, x, n_tok, y, pool);
  return Status::OK();
}

bool MatMulForcePath(MatMulPath p) {
  const int8::Isa best = int8::DetectIsa();
  if ((p == MatMulPath::kInt8Avx2 && best == int8::Isa::kScalar) ||
      ((p == MatMulPath::kInt8Avx512 || p == MatMulPath::kInt8Avx512Tiles) &&
       best != int8::Isa::kAvx512Vnni)) {
    return false;
  }
  g_path.store(p, std::memory_order_relaxed);
  return true;
}

std::vector<MatMulPath> MatMulAvailablePaths() {
  std::vector<MatMulPath> v = {MatMulPath::kAuto, MatMulPath::kFloat, MatMulPath::kInt8Scalar};
  const int8::Isa best = int8::DetectIsa();
  if (best != int8::Isa::kScalar) v.push_back(MatMulPath::kInt8Avx2);
  if (best == int8::Isa::kAvx512Vnni) {
    v.push_back(MatMulPath::kInt8Avx512);
    v.push_back(MatMulPath::kInt8Avx512Tiles);
  }
  return v;
}

std::string MatMulKernelName(uint32_t ggml_type, size_t n_tok) {
  if (const int8::Int8Kernels* k = Int8For(ggml_type)) {
    if (UseGemm(ggml_type, n_tok)) return GgmlTypeName(ggml_type) + " int8 gemm avx512vnni";
    return std::string(k->name) + (n_tok <= 2 * k->tile_tok ? " decode" : " prefill");
  }
  if (n_tok >= GemmFloatMinTokens(ggml_type) &&
      g_path.load(std::memory_order_relaxed) == MatMulPath::kAuto &&
      int8::GemmFloatSupports(ggml_type, 1024)) {
    return GgmlTypeName(ggml_type) + " gemm avx512" +
           (ggml_type == static_cast<uint32_t>(GgmlType::kBF16) ? "bf16" : "f");
  }
  return GgmlTypeName(ggml_type) + " float " + MatMulTargetName() +
         (n_tok <= 4 ? " decode" : " tiles");
}

Status MatMulRef(const WeightMatrix& w, const float* x, size_t n_tok, double* y) {
  std::optional<Format> f;
  KVTIER_RETURN_IF_ERROR(CheckMatrix(w, &f));
  std::vector<float> row(w.n_in);  // [n_in]
  for (size_t o = 0; o < w.n_out; ++o) {
    KVTIER_RETURN_IF_ERROR(
        DequantizeWeightRowsRef(w.type, w.data + o * w.row_bytes, 1, w.n_in, row.data()));
    for (size_t t = 0; t < n_tok; ++t) {
      double s = 0.0;
      for (size_t k = 0; k < w.n_in; ++k) s += double(row[k]) * double(x[t * w.n_in + k]);
      y[t * w.n_out + o] = s;
    }
  }
  return Status::OK();
}

const char* MatMulTargetName() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

}  // namespace kvtier::model
#endif  // HWY_ONCE
