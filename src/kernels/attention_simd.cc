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

template <size_t kD>
bool RunItemD(const Job& job, const Item& it, float* partial) {
  const DF df;
  constexpr size_t N = HWY_LANES(float);
  static_assert(kD % N == 0, "head_dim must be a multiple of the vector length");
  constexpr size_t V = kD / N;  // vectors per row
  const PagedKvView& kv = *job.kv;
  const PagedKvRow& row = kv.rows[it.row];
  const uint32_t len = row.length;
  const uint32_t qlen = job.q_lens[it.row];
  const uint32_t G = job.group;
  const uint32_t nq = it.qv_end - it.qv_begin;
  const float neg_inf = -std::numeric_limits<float>::infinity();

  float m[kMaxQv] = {}, l[kMaxQv] = {};
  HWY_ALIGN float acc[kMaxQv][kD];
  uint32_t pos[kMaxQv] = {}, first[kMaxQv] = {};
  const float* qp[kMaxQv] = {};
  for (uint32_t i = 0; i < nq; ++i) {
    const uint32_t v = it.qv_begin + i;
    const uint32_t qi = v / G;
    pos[i] = len - qlen + qi;
    first[i] = job.window > 0 && pos[i] + 1 > job.window ? pos[i] + 1 - job.window : 0;
    qp[i] = job.q + ((job.q_first[it.row] + qi) * job.n_heads + it.kv_head * G + v % G) * kD;
    m[i] = neg_inf;
    l[i] = 0.0f;
    for (size_t k = 0; k < kD; k += N) hn::Store(hn::Zero(df), df, &acc[i][k]);
  }
  // Keys any of these queries can see, within this split.
  uint32_t lo = it.key_begin, hi = it.key_end;
  lo = std::max(lo, *std::min_element(first, first + nq));
  hi = std::min(hi, *std::max_element(pos, pos + nq) + 1);

  HWY_ALIGN float kt[kTile][kD];
  HWY_ALIGN float vt[kTile][kD];
  HWY_ALIGN float s[kTile + HWY_LANES(float)] = {};  // padded: whole vectors at any offset
  const uint32_t bt = kv.block_tokens;
  for (uint32_t t0 = lo; t0 < hi;) {
    const uint32_t t1 = std::min({hi, (t0 / bt + 1) * bt, t0 + kTile});
    const uint32_t nt = t1 - t0;
    const size_t block = static_cast<size_t>(row.block_table[t0 / bt]);
    const size_t slot = t0 % bt;
    const uint8_t* kp = kv.k_base + block * kv.block_stride + slot * kv.k_token_stride +
                        it.kv_head * kv.k_head_stride;
    const uint8_t* vp = kv.v_base + block * kv.block_stride + slot * kv.v_token_stride +
                        it.kv_head * kv.v_head_stride;
    if (!simd::DequantizeRowsStrided(kv.k_format, kp, kv.k_token_stride, nt, kD, DType::kF32,
                                     kt) ||
        !simd::DequantizeRowsStrided(kv.v_format, vp, kv.v_token_stride, nt, kD, DType::kF32,
                                     vt)) {
      return false;
    }
    for (uint32_t i = 0; i < nq; ++i) {
      const uint32_t a = std::max(t0, first[i]);
      const uint32_t b = std::min(t1, pos[i] + 1);
      if (a >= b) continue;
      VF q[V];
      for (size_t k = 0; k < V; ++k) q[k] = hn::LoadU(df, qp[i] + k * N);
      float smax = neg_inf;
      for (uint32_t t = a; t < b; ++t) {
        const float* kr = kt[t - t0];
        VF sum = hn::Mul(q[0], hn::Load(df, kr));
        for (size_t k = 1; k < V; ++k) sum = hn::MulAdd(q[k], hn::Load(df, kr + k * N), sum);
        float sc = hn::GetLane(hn::SumOfLanes(df, sum)) * job.scale;
        if (job.softcap > 0) sc = job.softcap * std::tanh(sc / job.softcap);
        s[t - t0] = sc;
        smax = std::max(smax, sc);
      }
      const float m_new = std::max(m[i], smax);
      const float corr = std::exp(m[i] - m_new);  // 0 on the first tile (m = -inf)
      // p = exp(s - m_new), N lanes at a time; lanes outside [a, b) are not used.
      const VF vm = hn::Set(df, m_new);
      float psum = 0.0f;
      for (uint32_t t = a; t < b; t += static_cast<uint32_t>(N)) {
        // Lanes past b hold stale scores; their results are never read.
        hn::StoreU(hn::Exp(df, hn::Sub(hn::LoadU(df, s + (t - t0)), vm)), df, s + (t - t0));
      }
      VF o[V];
      const VF vc = hn::Set(df, corr);
      for (size_t k = 0; k < V; ++k) o[k] = hn::Mul(hn::Load(df, &acc[i][k * N]), vc);
      for (uint32_t t = a; t < b; ++t) {
        const float p = s[t - t0];
        psum += p;
        const VF vp8 = hn::Set(df, p);
        const float* vr = vt[t - t0];
        for (size_t k = 0; k < V; ++k) o[k] = hn::MulAdd(vp8, hn::Load(df, vr + k * N), o[k]);
      }
      for (size_t k = 0; k < V; ++k) hn::Store(o[k], df, &acc[i][k * N]);
      l[i] = l[i] * corr + psum;
      m[i] = m_new;
    }
    t0 = t1;
  }
  for (uint32_t i = 0; i < nq; ++i) {
    float* out = partial + i * (kD + 2);
    out[0] = m[i];
    out[1] = l[i];
    std::copy(acc[i], acc[i] + kD, out + 2);
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
