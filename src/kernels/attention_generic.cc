// The generic attention path: every format quant can decode, every supported head_dim, every
// Highway target (compiled for each and dispatched at run time). The fallback of dispatch.h.
//
// Per item: walk its keys in tiles of at most kTile tokens that stay inside one KV block;
// decode the tile's K and V rows of this KV head into small f32 tiles (fixed size, L1
// resident; the quant module's SIMD decoders, bit-identical to the reference); then for each
// query vector: scores (q.k in f32 FMAs), an online-softmax update and the weighted V sum,
// with the output accumulator held in registers. head_dim is a template parameter.
// Stateless; thread-safe.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention_generic.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

#include <algorithm>
#include <cstring>

#include "kernels/job.h"
#include "kernels/paths.h"
#include "kernels/softmax-inl.h"
#include "quant/chan_simd.h"
#include "quant/quant_simd.h"
#include "simd/reduce-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvtier::attn::HWY_NAMESPACE {
namespace {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
constexpr uint32_t kTile = 32;

template <size_t kD>
bool RunItemD(const Job& job, const Item& it, float* partial) {
  const DF df;
  constexpr size_t N = HWY_LANES(float);
  static_assert(kD % N == 0, "head_dim must be a multiple of the vector length");
  static_assert(kTile % N == 0, "tiles are whole vectors of tokens");
  constexpr size_t V = kD / N;  // vectors per row
  const PagedKvView& kv = *job.kv;
  const PagedKvRow& row = kv.rows[it.row];
  const uint32_t G = job.group;
  const uint32_t nq = it.qv_end - it.qv_begin;

  const uint32_t nh = it.head_end - it.head_begin;
  constexpr size_t kStride = kD + 2;  // partial: {m, l, acc[kD]} per (head, query vector)
  ItemQueries qs;
  PrepareItem(job, it, kD, partial, &qs);
  const uint32_t* pos = qs.pos;
  const uint32_t* first = qs.first;
  const size_t* q_off = qs.q_off;
  const uint32_t lo = qs.lo, hi = qs.hi;

  // K and V rows of the tile in f32. V starts 3 cache lines after a 4 KiB multiple from K,
  // so loads of one never alias (modulo 4 KiB) with stores to the other.
  HWY_ALIGN float tiles[2 * kTile * kD + 48];
  float (*kt)[kD] = reinterpret_cast<float (*)[kD]>(tiles);
  float (*vt)[kD] = reinterpret_cast<float (*)[kD]>(tiles + kTile * kD + 48);
  HWY_ALIGN float s[kTile];       // scores, then probabilities
  const VF vscale = hn::Set(df, job.scale);
  const uint32_t bt = kv.block_tokens;
  for (uint32_t t0 = lo; t0 < hi;) {
    const uint32_t t1 = std::min({hi, (t0 / bt + 1) * bt, t0 + kTile});
    const uint32_t nt = t1 - t0;
    const uint32_t nt_pad = static_cast<uint32_t>((nt + N - 1) / N * N);
    const size_t block = static_cast<size_t>(row.block_table[t0 / bt]);
    const size_t slot = t0 % bt;
    // The next tile's K and V rows of these heads are prefetched into L2, a slice per head,
    // while this tile is computed (a burst would stall on the line-fill buffers).
    const uint8_t* kn = nullptr;
    const uint8_t* vn = nullptr;
    size_t kbytes = 0, vbytes = 0;
    if (t1 < hi) {
      const uint32_t n1 = std::min({hi, (t1 / bt + 1) * bt, t1 + kTile}) - t1;
      const size_t b1 = static_cast<size_t>(row.block_table[t1 / bt]);
      const size_t s1 = t1 % bt;
      kn = kv.k_base + b1 * kv.block_stride + s1 * kv.k_token_stride +
           it.head_begin * kv.k_head_stride;
      vn = kv.v_base + b1 * kv.block_stride + s1 * kv.v_token_stride +
           it.head_begin * kv.v_head_stride;
      kbytes = (n1 - 1) * kv.k_token_stride + (it.head_end - it.head_begin) * kv.k_head_stride;
      vbytes = (n1 - 1) * kv.v_token_stride + (it.head_end - it.head_begin) * kv.v_head_stride;
    }
    const size_t k_slice = (kbytes / nh + 63) / 64 * 64;
    const size_t v_slice = (vbytes / nh + 63) / 64 * 64;
    for (uint32_t h = it.head_begin; h < it.head_end; ++h) {
    if (kn != nullptr) {
      const size_t j = h - it.head_begin;
      for (size_t o = j * k_slice; o < std::min(kbytes, (j + 1) * k_slice); o += 64) {
        __builtin_prefetch(kn + o, 0, 2);
      }
      for (size_t o = j * v_slice; o < std::min(vbytes, (j + 1) * v_slice); o += 64) {
        __builtin_prefetch(vn + o, 0, 2);
      }
    }
    const uint8_t* kp = kv.k_base + block * kv.block_stride + slot * kv.k_token_stride +
                        h * kv.k_head_stride;
    const uint8_t* vp = kv.v_base + block * kv.block_stride + slot * kv.v_token_stride +
                        h * kv.v_head_stride;
    // Rows in their stored basis: rotated formats stay rotated (the driver rotated the
    // queries and rotates the outputs back).
    // Token-grouped K (chan): decoded from its group's first row (the tile stays in a block,
    // and groups never cross blocks).
    if (kv.k_format.is_token_grouped()) {
      const size_t j = slot % kv.k_format.group;
      simd::DequantizeChanHead(kv.k_format, kp - j * kv.k_token_stride, kv.k_token_stride, j, nt,
                               kD, DType::kF32, &kt[0][0], kD);
    } else if (!simd::DequantizeRowsStridedStored(kv.k_format, kp, kv.k_token_stride, nt, kD,
                                                  &kt[0][0])) {
      return false;
    }
    if (!simd::DequantizeRowsStridedStored(kv.v_format, vp, kv.v_token_stride, nt, kD, &vt[0][0])) {
      return false;
    }
    for (uint32_t t = nt; t < nt_pad; ++t) std::fill(kt[t], kt[t] + kD, 0.0f);
    const float* qh = job.q + size_t{h} * G * kD;
    for (uint32_t i = 0; i < nq; ++i) {
      float* st = partial + ((h - it.head_begin) * nq + i) * kStride;
      float* acc_i = st + 2;
      const uint32_t a = std::max(t0, first[i]);
      const uint32_t b = std::min(t1, pos[i] + 1);
      if (a >= b) continue;
      // Scores of N tokens at a time: N independent FMA chains, one batched reduction.
      for (uint32_t g = 0; g < nt_pad; g += static_cast<uint32_t>(N)) {
        VF sacc[N];
        for (size_t j = 0; j < N; ++j) sacc[j] = hn::Zero(df);
        for (size_t k = 0; k < V; ++k) {
          const VF qk = hn::LoadU(df, qh + q_off[i] + k * N);
          for (size_t j = 0; j < N; ++j) {
            sacc[j] = hn::MulAdd(qk, hn::Load(df, &kt[g + j][k * N]), sacc[j]);
          }
        }
        hn::Store(hn::Mul(kvtier::HWY_NAMESPACE::SumBatch(df, sacc), vscale), df, s + g);
      }
      const float corr = SoftmaxStep(df, s, nt_pad, t0, a, b, job.softcap, st);
      VF o[V];
      const VF vc = hn::Set(df, corr);
      for (size_t k = 0; k < V; ++k) o[k] = hn::Mul(hn::LoadU(df, acc_i + k * N), vc);
      for (uint32_t t = a; t < b; ++t) {
        const VF pt = hn::Set(df, s[t - t0]);
        const float* vr = vt[t - t0];
        for (size_t k = 0; k < V; ++k) o[k] = hn::MulAdd(pt, hn::Load(df, vr + k * N), o[k]);
      }
      for (size_t k = 0; k < V; ++k) hn::StoreU(o[k], df, acc_i + k * N);
    }
    }
    t0 = t1;
  }
  return true;
}

}  // namespace

bool RunItemGenericImpl(const Job& job, const Item& item, float* partial) {
  switch (job.kernel.head_dim) {
    case 64: return RunItemD<64>(job, item, partial);
    case 80: return RunItemD<80>(job, item, partial);
    case 96: return RunItemD<96>(job, item, partial);
    case 128: return RunItemD<128>(job, item, partial);
    case 256: return RunItemD<256>(job, item, partial);
    default: return false;
  }
}

}  // namespace kvtier::attn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvtier::attn {

HWY_EXPORT(RunItemGenericImpl);

bool RunItemGeneric(const Job& job, const Item& item, float* partial) {
  return HWY_DYNAMIC_DISPATCH(RunItemGenericImpl)(job, item, partial);
}

}  // namespace kvtier::attn
#endif  // HWY_ONCE
