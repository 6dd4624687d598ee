// Weight-matrix products, compiled for every Highway target and dispatched at run time.
// See matmul.h for the two paths. Stateless; per-thread scratch is thread_local.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "model/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/thread_pool.h"
#include "kvtier/quant.h"
#include "model/matmul.h"
#include "quant/quant_simd.h"

HWY_BEFORE_NAMESPACE();
namespace kvtier::model::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

constexpr size_t kDecodeRows = 4;   // weight rows decoded together on the dot path
constexpr size_t kMr = 6;           // tokens per micro-kernel call on the packed path
constexpr size_t kTokBlock = 96;    // tokens per work item on the packed path (multiple of kMr)

// Grows a thread's scratch to at least n floats (64-byte aligned).
float* Scratch(std::vector<float>& v, size_t n) {
  if (v.size() < n + 16) v.resize(n + 16);
  auto p = reinterpret_cast<uintptr_t>(v.data());
  return reinterpret_cast<float*>((p + 63) & ~uintptr_t{63});
}

// out[r] = dot(w[r], x) for r < kDecodeRows.   w [kDecodeRows][n] f32, x [n] f32
HWY_INLINE void Dot4(const float* HWY_RESTRICT w, const float* HWY_RESTRICT x, size_t n,
                     float* out) {
  const DF df;
  const size_t N = hn::Lanes(df);
  VF a0 = hn::Zero(df), a1 = hn::Zero(df), a2 = hn::Zero(df), a3 = hn::Zero(df);
  size_t k = 0;
  for (; k + N <= n; k += N) {
    const VF xv = hn::LoadU(df, x + k);
    a0 = hn::MulAdd(hn::LoadU(df, w + k), xv, a0);
    a1 = hn::MulAdd(hn::LoadU(df, w + n + k), xv, a1);
    a2 = hn::MulAdd(hn::LoadU(df, w + 2 * n + k), xv, a2);
    a3 = hn::MulAdd(hn::LoadU(df, w + 3 * n + k), xv, a3);
  }
  out[0] = hn::GetLane(hn::SumOfLanes(df, a0));
  out[1] = hn::GetLane(hn::SumOfLanes(df, a1));
  out[2] = hn::GetLane(hn::SumOfLanes(df, a2));
  out[3] = hn::GetLane(hn::SumOfLanes(df, a3));
  for (; k < n; ++k) {
    for (size_t r = 0; r < kDecodeRows; ++r) out[r] += w[r * n + k] * x[k];
  }
}

// Few tokens: rows kDecodeRows at a time.
void DotPath(const WeightMatrix& w, const Format& f, const float* x, size_t n_tok, float* y,
             ThreadPool* pool) {
  const size_t n_in = w.n_in, n_out = w.n_out;
  const size_t n_groups = (n_out + kDecodeRows - 1) / kDecodeRows;
  auto run = [&](size_t g0, size_t g1) {
    thread_local std::vector<float> scratch;
    float* buf = Scratch(scratch, kDecodeRows * n_in);  // [kDecodeRows][n_in]
    for (size_t g = g0; g < g1; ++g) {
      const size_t o0 = g * kDecodeRows;
      const size_t nr = std::min(kDecodeRows, n_out - o0);
      simd::DequantizeRowsStrided(f, w.data + o0 * w.row_bytes, w.row_bytes, nr, n_in,
                                  DType::kF32, buf);
      if (nr < kDecodeRows) std::memset(buf + nr * n_in, 0, (kDecodeRows - nr) * n_in * 4);
      for (size_t t = 0; t < n_tok; ++t) {
        float out[kDecodeRows];
        Dot4(buf, x + t * n_in, n_in, out);
        for (size_t r = 0; r < nr; ++r) y[t * n_out + o0 + r] = out[r];
      }
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(n_groups, 0, run);
  } else {
    run(0, n_groups);
  }
}

// c[i][:] = sum_k x[i][k] * packed[k][:] for MR tokens and one panel of 2N outputs.
//   packed [n_in][2N], x rows n_in apart, y rows n_out apart (ncols valid outputs)
template <size_t MR>
HWY_NOINLINE void MicroKernel(const float* HWY_RESTRICT packed, const float* HWY_RESTRICT x,
                              size_t n_in, float* HWY_RESTRICT y, size_t n_out, size_t ncols) {
  const DF df;
  const size_t N = hn::Lanes(df);
  VF c0[MR], c1[MR];
  for (size_t i = 0; i < MR; ++i) c0[i] = c1[i] = hn::Zero(df);
  for (size_t k = 0; k < n_in; ++k) {
    const VF b0 = hn::Load(df, packed + k * 2 * N);
    const VF b1 = hn::Load(df, packed + k * 2 * N + N);
    for (size_t i = 0; i < MR; ++i) {
      const VF a = hn::Set(df, x[i * n_in + k]);
      c0[i] = hn::MulAdd(a, b0, c0[i]);
      c1[i] = hn::MulAdd(a, b1, c1[i]);
    }
  }
  if (ncols == 2 * N) {
    for (size_t i = 0; i < MR; ++i) {
      hn::StoreU(c0[i], df, y + i * n_out);
      hn::StoreU(c1[i], df, y + i * n_out + N);
    }
    return;
  }
  HWY_ALIGN float tmp[2 * HWY_MAX_BYTES / sizeof(float)];
  for (size_t i = 0; i < MR; ++i) {
    hn::Store(c0[i], df, tmp);
    hn::Store(c1[i], df, tmp + N);
    std::memcpy(y + i * n_out, tmp, ncols * sizeof(float));
  }
}

void RunMicro(size_t mr, const float* packed, const float* x, size_t n_in, float* y,
              size_t n_out, size_t ncols) {
  switch (mr) {
    case 6: return MicroKernel<6>(packed, x, n_in, y, n_out, ncols);
    case 5: return MicroKernel<5>(packed, x, n_in, y, n_out, ncols);
    case 4: return MicroKernel<4>(packed, x, n_in, y, n_out, ncols);
    case 3: return MicroKernel<3>(packed, x, n_in, y, n_out, ncols);
    case 2: return MicroKernel<2>(packed, x, n_in, y, n_out, ncols);
    default: return MicroKernel<1>(packed, x, n_in, y, n_out, ncols);
  }
}

// Many tokens: work items are (token block, panel of 2N output rows), token-block major so a
// thread's consecutive items reuse the same tokens from cache.
void PackedPath(const WeightMatrix& w, const Format& f, const float* x, size_t n_tok, float* y,
                ThreadPool* pool) {
  const DF df;
  const size_t nr = 2 * hn::Lanes(df);
  const size_t n_in = w.n_in, n_out = w.n_out;
  const size_t n_panels = (n_out + nr - 1) / nr;
  const size_t n_blocks = (n_tok + kTokBlock - 1) / kTokBlock;
  auto run = [&](size_t i0, size_t i1) {
    thread_local std::vector<float> rows_scratch, packed_scratch;
    float* rows = Scratch(rows_scratch, nr * n_in);      // [nr][n_in]
    float* packed = Scratch(packed_scratch, n_in * nr);  // [n_in][nr]
    for (size_t item = i0; item < i1; ++item) {
      const size_t tb = item / n_panels, p = item % n_panels;
      const size_t o0 = p * nr;
      const size_t ncols = std::min(nr, n_out - o0);
      simd::DequantizeRowsStrided(f, w.data + o0 * w.row_bytes, w.row_bytes, ncols, n_in,
                                  DType::kF32, rows);
      for (size_t k = 0; k < n_in; ++k) {
        float* dst = packed + k * nr;
        for (size_t j = 0; j < ncols; ++j) dst[j] = rows[j * n_in + k];
        for (size_t j = ncols; j < nr; ++j) dst[j] = 0.0f;
      }
      const size_t t_end = std::min(n_tok, (tb + 1) * kTokBlock);
      for (size_t t = tb * kTokBlock; t < t_end; t += kMr) {
        const size_t mr = std::min(kMr, t_end - t);
        RunMicro(mr, packed, x + t * n_in, n_in, y + t * n_out + o0, n_out, ncols);
      }
    }
  };
  if (pool != nullptr) {
    pool->ParallelFor(n_blocks * n_panels, 0, run);
  } else {
    run(0, n_blocks * n_panels);
  }
}

void MatMulImpl(const WeightMatrix& w, const Format& f, const float* x, size_t n_tok, float* y,
                ThreadPool* pool) {
  if (n_tok <= 3) {
    DotPath(w, f, x, n_tok, y, pool);
  } else {
    PackedPath(w, f, x, n_tok, y, pool);
  }
}

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace kvtier::model::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvtier::model {

HWY_EXPORT(MatMulImpl);
HWY_EXPORT(TargetNameImpl);

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

static Status CheckMatrix(const WeightMatrix& w, Format* f) {
  KVTIER_ASSIGN_OR_RETURN(*f, WeightRowFormat(w.type));
  KVTIER_RETURN_IF_ERROR(f->CheckHeadDim(w.n_in));
  if (w.row_bytes != f->row_bytes(w.n_in) || w.data == nullptr) {
    return Status::InvalidArgument("weight matrix: row_bytes " + std::to_string(w.row_bytes) +
                                   " but " + std::to_string(f->row_bytes(w.n_in)) +
                                   " expected for " + std::to_string(w.n_in) + " values of " +
                                   f->name());
  }
  return Status::OK();
}

Status MatMul(const WeightMatrix& w, const float* x, size_t n_tok, float* y, ThreadPool* pool) {
  Format f;
  KVTIER_RETURN_IF_ERROR(CheckMatrix(w, &f));
  if (n_tok == 0 || w.n_out == 0) return Status::OK();
  HWY_DYNAMIC_DISPATCH(MatMulImpl)(w, f, x, n_tok, y, pool);
  return Status::OK();
}

Status MatMulRef(const WeightMatrix& w, const float* x, size_t n_tok, double* y) {
  Format f;
  KVTIER_RETURN_IF_ERROR(CheckMatrix(w, &f));
  std::vector<float> row(w.n_in);  // [n_in]
  for (size_t o = 0; o < w.n_out; ++o) {
    KVTIER_RETURN_IF_ERROR(
        DequantizeRowsRef(f, w.data + o * w.row_bytes, 1, w.n_in, DType::kF32, row.data()));
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
