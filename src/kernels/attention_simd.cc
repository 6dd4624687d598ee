// Attention inner kernel, compiled for every Highway target and dispatched at run time.
//
// Per item: walk its keys in tiles of at most kTile tokens that stay inside one KV block;
// decode the tile's K and V rows of this KV head into small f32 tiles (fixed size, L1
// resident; the quant module's SIMD decoders, bit-identical to the reference); then for each
// query vector: scores (q.k in f32 FMAs), an online-softmax update and the weighted V sum,
// with the output accumulator held in registers. head_dim is a template parameter.
// Stateless; thread-safe.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/attention_simd.h"
#include "quant/quant_simd.h"

HWY_BEFORE_NAMESPACE();
namespace kvtier::attn::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
constexpr uint32_t kTile = 32;

// Horizontal sums of N vectors at once: lane j of the result = sum of the lanes of acc[j].
HWY_INLINE VF SumBatch(DF df, const VF* acc) {
#if HWY_TARGET <= HWY_AVX3
  (void)df;
  // 512 -> 256 bits: lanes 0..7 hold a partial of x, 8..15 of y.
  auto halve = [](__m512 x, __m512 y) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
  };
  // 256 -> 128 bits: 128-bit block k holds 4 partials of input k.
  auto quarter = [](__m512 xy, __m512 zw) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(xy, zw, 0x88), _mm512_shuffle_f32x4(xy, zw, 0xDD));
  };
  // Q[m]'s block k holds input m + 4k.
  __m512 q[4];
  for (int m = 0; m < 4; ++m) {
    q[m] = quarter(halve(acc[m].raw, acc[m + 4].raw), halve(acc[m + 8].raw, acc[m + 12].raw));
  }
  // Sum the 4 lanes of every block, block k lane m <- Q[m] block k: input 4k + m.
  const __m512 u0 = _mm512_add_ps(_mm512_unpacklo_ps(q[0], q[1]), _mm512_unpackhi_ps(q[0], q[1]));
  const __m512 u1 = _mm512_add_ps(_mm512_unpacklo_ps(q[2], q[3]), _mm512_unpackhi_ps(q[2], q[3]));
  const __m512 v = _mm512_add_ps(
      _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(u0), _mm512_castps_pd(u1))),
      _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(u0), _mm512_castps_pd(u1))));
  return VF{v};
#else
  constexpr size_t N = HWY_LANES(float);
  HWY_ALIGN float sums[N];
  for (size_t j = 0; j < N; ++j) sums[j] = hn::GetLane(hn::SumOfLanes(df, acc[j]));
  return hn::Load(df, sums);
#endif
}

template <size_t kD>
bool RunItemD(const Job& job, const Item& it, float* partial) {
  const DF df;
  constexpr size_t N = HWY_LANES(float);
  static_assert(kD % N == 0, "head_dim must be a multiple of the vector length");
  static_assert(kTile % N == 0, "tiles are whole vectors of tokens");
  constexpr size_t V = kD / N;  // vectors per row
  const PagedKvView& kv = *job.kv;
  const PagedKvRow& row = kv.rows[it.row];
  const uint32_t len = row.length;
  const uint32_t qlen = job.q_lens[it.row];
  const uint32_t G = job.group;
  const uint32_t nq = it.qv_end - it.qv_begin;
  const float neg_inf = -std::numeric_limits<float>::infinity();

  const uint32_t nh = it.head_end - it.head_begin;
  constexpr size_t kStride = kD + 2;  // partial: {m, l, acc[kD]} per (head, query vector)
  uint32_t pos[kMaxQv] = {}, first[kMaxQv] = {};
  size_t q_off[kMaxQv] = {};  // offset of query vector i of KV head 0
  for (uint32_t i = 0; i < nq; ++i) {
    const uint32_t v = it.qv_begin + i;
    const uint32_t qi = v / G;
    pos[i] = len - qlen + qi;
    first[i] = job.window > 0 && pos[i] + 1 > job.window ? pos[i] + 1 - job.window : 0;
    q_off[i] = ((job.q_first[it.row] + qi) * job.n_heads + v % G) * kD;
  }
  for (uint32_t j = 0; j < nh * nq; ++j) {
    float* st = partial + j * kStride;
    st[0] = neg_inf;
    st[1] = 0.0f;
    std::fill(st + 2, st + kStride, 0.0f);
  }
  // Keys any of these queries can see, within this split.
  uint32_t lo = it.key_begin, hi = it.key_end;
  lo = std::max(lo, *std::min_element(first, first + nq));
  hi = std::min(hi, *std::max_element(pos, pos + nq) + 1);

  HWY_ALIGN float kt[kTile][kD];  // K rows of the tile, f32
  HWY_ALIGN float vt[kTile][kD];  // V rows of the tile, f32
  HWY_ALIGN float s[kTile];       // scores, then probabilities
  const VF vscale = hn::Set(df, job.scale);
  const VF vcap = hn::Set(df, job.softcap > 0 ? job.softcap : 1.0f);
  const VF vinv_cap = hn::Set(df, job.softcap > 0 ? 1.0f / job.softcap : 1.0f);
  const VF vneg_inf = hn::Set(df, neg_inf);
  const auto lane = hn::Iota(hn::RebindToSigned<DF>(), 0);
  const uint32_t bt = kv.block_tokens;
  for (uint32_t t0 = lo; t0 < hi;) {
    const uint32_t t1 = std::min({hi, (t0 / bt + 1) * bt, t0 + kTile});
    const uint32_t nt = t1 - t0;
    const uint32_t nt_pad = static_cast<uint32_t>((nt + N - 1) / N * N);
    const size_t block = static_cast<size_t>(row.block_table[t0 / bt]);
    const size_t slot = t0 % bt;
    // Prefetch the next tile's K and V rows of these heads while this one is computed.
    if (t1 < hi) {
      const uint32_t n1 = std::min({hi, (t1 / bt + 1) * bt, t1 + kTile}) - t1;
      const size_t b1 = static_cast<size_t>(row.block_table[t1 / bt]);
      const size_t s1 = t1 % bt;
      const uint8_t* kn = kv.k_base + b1 * kv.block_stride + s1 * kv.k_token_stride +
                          it.head_begin * kv.k_head_stride;
      const uint8_t* vn = kv.v_base + b1 * kv.block_stride + s1 * kv.v_token_stride +
                          it.head_begin * kv.v_head_stride;
      const size_t kbytes = (n1 - 1) * kv.k_token_stride + (it.head_end - it.head_begin) * kv.k_head_stride;
      const size_t vbytes = (n1 - 1) * kv.v_token_stride + (it.head_end - it.head_begin) * kv.v_head_stride;
      for (size_t o = 0; o < kbytes; o += 64) __builtin_prefetch(kn + o);
      for (size_t o = 0; o < vbytes; o += 64) __builtin_prefetch(vn + o);
    }
    for (uint32_t h = it.head_begin; h < it.head_end; ++h) {
    const uint8_t* kp = kv.k_base + block * kv.block_stride + slot * kv.k_token_stride +
                        h * kv.k_head_stride;
    const uint8_t* vp = kv.v_base + block * kv.block_stride + slot * kv.v_token_stride +
                        h * kv.v_head_stride;
    if (!simd::DequantizeRowsStrided(kv.k_format, kp, kv.k_token_stride, nt, kD, DType::kF32,
                                     kt) ||
        !simd::DequantizeRowsStrided(kv.v_format, vp, kv.v_token_stride, nt, kD, DType::kF32,
                                     vt)) {
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
      VF smax_v = vneg_inf;
      for (uint32_t g = 0; g < nt_pad; g += static_cast<uint32_t>(N)) {
        VF sacc[N];
        for (size_t j = 0; j < N; ++j) sacc[j] = hn::Zero(df);
        for (size_t k = 0; k < V; ++k) {
          const VF qk = hn::LoadU(df, qh + q_off[i] + k * N);
          for (size_t j = 0; j < N; ++j) {
            sacc[j] = hn::MulAdd(qk, hn::Load(df, &kt[g + j][k * N]), sacc[j]);
          }
        }
        VF sc = hn::Mul(SumBatch(df, sacc), vscale);
        if (job.softcap > 0) {
          // cap * tanh(x / cap), tanh(y) = 1 - 2 / (exp(2y) + 1)
          const VF e = hn::Exp(df, hn::Add(hn::Mul(sc, vinv_cap), hn::Mul(sc, vinv_cap)));
          const VF one = hn::Set(df, 1.0f);
          sc = hn::Mul(vcap, hn::Sub(one, hn::Div(hn::Set(df, 2.0f), hn::Add(e, one))));
        }
        // Keys outside [a, b) get -inf.
        const auto t_abs = hn::Add(lane, hn::Set(hn::RebindToSigned<DF>(), static_cast<int32_t>(t0 + g)));
        const auto visible =
            hn::And(hn::Gt(t_abs, hn::Set(hn::RebindToSigned<DF>(), static_cast<int32_t>(a) - 1)),
                    hn::Lt(t_abs, hn::Set(hn::RebindToSigned<DF>(), static_cast<int32_t>(b))));
        sc = hn::IfThenElse(hn::RebindMask(df, visible), sc, vneg_inf);
        smax_v = hn::Max(smax_v, sc);
        hn::Store(sc, df, s + g);
      }
      const float smax = hn::GetLane(hn::MaxOfLanes(df, smax_v));
      const float m_new = std::max(st[0], smax);
      const float corr = std::exp(st[0] - m_new);  // 0 on the first tile (m = -inf)
      const VF vm = hn::Set(df, m_new);
      VF psum_v = hn::Zero(df);
      for (uint32_t g = 0; g < nt_pad; g += static_cast<uint32_t>(N)) {
        const VF x = hn::Load(df, s + g);
        // exp(-inf) is 0 for masked keys; select keeps it exact whatever Exp does there.
        const VF p = hn::IfThenElseZero(hn::Gt(x, vneg_inf), hn::Exp(df, hn::Sub(x, vm)));
        psum_v = hn::Add(psum_v, p);
        hn::Store(p, df, s + g);
      }
      VF o[V];
      const VF vc = hn::Set(df, corr);
      for (size_t k = 0; k < V; ++k) o[k] = hn::Mul(hn::LoadU(df, acc_i + k * N), vc);
      for (uint32_t t = a; t < b; ++t) {
        const VF pt = hn::Set(df, s[t - t0]);
        const float* vr = vt[t - t0];
        for (size_t k = 0; k < V; ++k) o[k] = hn::MulAdd(pt, hn::Load(df, vr + k * N), o[k]);
      }
      for (size_t k = 0; k < V; ++k) hn::StoreU(o[k], df, acc_i + k * N);
      st[1] = st[1] * corr + hn::GetLane(hn::SumOfLanes(df, psum_v));
      st[0] = m_new;
    }
    }
    t0 = t1;
  }
  return true;
}

bool RunItemImpl(const Job& job, const Item& item, float* partial) {
  switch (job.kv->head_dim) {
    case 64: return RunItemD<64>(job, item, partial);
    case 80: return RunItemD<80>(job, item, partial);
    case 96: return RunItemD<96>(job, item, partial);
    case 128: return RunItemD<128>(job, item, partial);
    case 256: return RunItemD<256>(job, item, partial);
    default: return false;
  }
}

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace kvtier::attn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvtier::attn {

HWY_EXPORT(RunItemImpl);
HWY_EXPORT(TargetNameImpl);

bool RunItem(const Job& job, const Item& item, float* partial) {
  return HWY_DYNAMIC_DISPATCH(RunItemImpl)(job, item, partial);
}

std::string TargetName() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

}  // namespace kvtier::attn
#endif  // HWY_ONCE
