// The prefill attention path (f32): items with many query vectors
// (a prefill chunk's 4 query tokens x 4 GQA heads, say) run with the query vectors in the
// lanes of one vector (two below 16 float lanes), so each decoded K / V tile feeds all of them,
// each broadcast value feeds one FMA per lane vector and nothing is reduced across lanes. Per tile of kTT tokens (inside one block) of a KV head:
//   - K and V rows are decoded once (the fast path's per-format decoders, bit-identical to the
//     reference) into two small f32 tiles;
//   - scores S^T[t] = sum_d K[t][d] * Q^T[d]: Q^T (the item's query vectors transposed, one
//     vector per dim) is loaded once per dim and block of kTB tokens, each K value is a
//     broadcast FMA operand (kTB independent accumulators);
//   - the online softmax runs on whole vectors (m, l, correction per lane = per query vector);
//   - O^T[d] += V[t][d] * P^T[t], kDB dims of O^T held in registers while the tile's tokens
//     stream by (each V value a broadcast operand).
// O^T, Q^T, the tiles and P^T are fixed-size (no buffer grows with the context); O^T is
// transposed into the partials once at the end of the item. f32 accumulation throughout:
// results differ from the row-per-query fast path only by summation order.
// Serves prefill items (paths.h's IsPrefillItem: 8 or more lanes) of the pair table's
// kServeFast rows at head_dim 64, 128, 256, with the fast path's decoders (decoders-inl.h, in
// value order). Compiled for every Highway target and dispatched at run time. Stateless;
// thread-safe.

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention_prefill.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "kernels/decoders-inl.h"
#include "kernels/dispatch.h"
#include "kernels/job.h"
#include "kernels/paths.h"

HWY_BEFORE_NAMESPACE();
namespace kvtier::attn::HWY_NAMESPACE {
namespace {
namespace hn = hwy::HWY_NAMESPACE;

constexpr uint32_t kTile = 32;

// kD: head_dim; kTT: tokens per tile (at most); kTB: tokens per score block; kDB: dims of O^T
// per V pass (each times kQV vectors of accumulators). KDec / VDec: the fast path's decoders
// (Pair(df, row, k, ctx, a, b) gives chunks k and k + 1 of a row); Ctx: their row context.
// Query vector i sits in lane i % N of lane vector i / N (kQV lane vectors).
template <size_t kD, size_t kTT, size_t kTB, size_t kDB, size_t kQV, class KDec, class VDec, class DF,
          class Ctx>
void RunPrefill(DF df, const Job& job, const Item& it, float* partial, const Ctx& kc,
                    const Ctx& vc) {
  using VF = hn::Vec<DF>;
  constexpr size_t N = HWY_LANES(float);
  constexpr size_t NQ = kQV * N;  // query vector slots
  static_assert(N >= 8 && kD % (2 * N) == 0 && kD % kDB == 0 && kTT % kTB == 0,
                "prefill kernel geometry");
  const hn::RebindToSigned<DF> di;
  const PagedKvView& kv = *job.kv;
  const PagedKvRow& row = kv.rows[it.row];
  const uint32_t G = job.group;
  const uint32_t nq = it.qv_end - it.qv_begin;
  constexpr size_t kStride = kD + 2;

  ItemQueries qs;
  PrepareItem(job, it, kD, partial, &qs);
  const uint32_t lo = qs.lo, hi = qs.hi;
  if (lo >= hi) return;

  // Per lane (query vector): the keys it sees, [first, end); lanes past nq see none.
  HWY_ALIGN int32_t firsts[NQ], ends[NQ];  // first - 1, end
  uint32_t min_first = UINT32_MAX, max_end = 0;
  for (uint32_t i = 0; i < NQ; ++i) {
    firsts[i] = i < nq ? static_cast<int32_t>(qs.first[i]) - 1 : 0;  // compared with >
    ends[i] = i < nq ? static_cast<int32_t>(qs.pos[i] + 1) : 0;
    if (i < nq) {
      min_first = std::min(min_first, qs.first[i]);
      max_end = std::max(max_end, qs.pos[i] + 1);
    }
  }
  hn::Vec<decltype(di)> vfirst[kQV], vend[kQV];
  for (size_t v = 0; v < kQV; ++v) {
    vfirst[v] = hn::Load(di, firsts + v * N);
    vend[v] = hn::Load(di, ends + v * N);
  }
  const VF vneg_inf = hn::Set(df, -std::numeric_limits<float>::infinity());
  const VF vscale = hn::Set(df, job.scale);

  HWY_ALIGN float qt[kD * NQ];   // Q^T: dim d of query vector i at qt[d * NQ + i]
  HWY_ALIGN float ot[kD * NQ];   // O^T, same layout
  HWY_ALIGN float pt[kTT * NQ];  // scores, then probabilities, of token t at pt[t * NQ + i]
  // K and V rows of the tile in f32 (K padded with zero rows to whole score blocks). V starts
  // a few cache lines past a 4 KiB multiple from K, so loads of one never alias stores to the other.
  HWY_ALIGN float tiles[2 * kTT * kD + 48];
  float* const kt = tiles;
  float* const vt = tiles + kTT * kD + 48;
  constexpr size_t V = kD / N;  // chunks per row
  const uint32_t bt = kv.block_tokens;

  for (uint32_t h = it.head_begin; h < it.head_end; ++h) {
    const float* qh = job.q + size_t{h} * G * kD;
    for (size_t d = 0; d < kD; ++d) {
      for (uint32_t i = 0; i < NQ; ++i) qt[d * NQ + i] = i < nq ? qh[qs.q_off[i] + d] : 0.0f;
    }
    std::fill(ot, ot + kD * NQ, 0.0f);
    VF m[kQV], l[kQV];
    for (size_t v = 0; v < kQV; ++v) {
      m[v] = vneg_inf;
      l[v] = hn::Zero(df);
    }
    for (uint32_t t0 = lo; t0 < hi;) {
      const uint32_t t1 = std::min({hi, (t0 / bt + 1) * bt, t0 + static_cast<uint32_t>(kTT)});
      // Keys of this tile any query vector sees.
      const uint32_t ta = std::max(t0, min_first), tb = std::min(t1, max_end);
      if (ta >= tb) {
        t0 = t1;
        continue;
      }
      const uint32_t nt = tb - ta;
      const uint32_t nt_pad = static_cast<uint32_t>((nt + kTB - 1) / kTB * kTB);
      const size_t block = static_cast<size_t>(row.block_table[t0 / bt]);
      const size_t slot = ta % bt;
      const uint8_t* kb = kv.k_base + block * kv.block_stride + slot * kv.k_token_stride +
                          h * kv.k_head_stride;
      const uint8_t* vb = kv.v_base + block * kv.block_stride + slot * kv.v_token_stride +
                          h * kv.v_head_stride;
      for (uint32_t t = 0; t < nt; ++t) {
        const uint8_t* kr = kb + t * kv.k_token_stride;
        const uint8_t* vr = vb + t * kv.v_token_stride;
        for (size_t k = 0; k < V; k += 2) {
          VF a, b;
          KDec::Pair(df, kr, k, kc, a, b);
          hn::Store(a, df, kt + t * kD + k * N);
          hn::Store(b, df, kt + t * kD + (k + 1) * N);
          VDec::Pair(df, vr, k, vc, a, b);
          hn::Store(a, df, vt + t * kD + k * N);
          hn::Store(b, df, vt + t * kD + (k + 1) * N);
        }
      }
      for (uint32_t t = nt; t < nt_pad; ++t) std::fill(kt + t * kD, kt + (t + 1) * kD, 0.0f);
      // The next tile's K and V rows are prefetched into L2 a line at a time during the V
      // pass below (line j of row t at step (j, t)), so the decode above finds them there.
      const uint8_t* kn = nullptr;
      const uint8_t* vn = nullptr;
      uint32_t n_next = 0;
      if (t1 < hi) {
        n_next = std::min({hi, (t1 / bt + 1) * bt, t1 + static_cast<uint32_t>(kTT)}) - t1;
        const size_t b1 = static_cast<size_t>(row.block_table[t1 / bt]);
        kn = kv.k_base + b1 * kv.block_stride + (t1 % bt) * kv.k_token_stride +
             h * kv.k_head_stride;
        vn = kv.v_base + b1 * kv.block_stride + (t1 % bt) * kv.v_token_stride +
             h * kv.v_head_stride;
      }

      // Scores, kTB tokens at a time; masked (-inf) where a query vector does not see the key.
      VF mx[kQV];
      for (size_t v = 0; v < kQV; ++v) mx[v] = m[v];
      for (uint32_t tb0 = 0; tb0 < nt; tb0 += kTB) {
        // Accumulator i: token i / kQV, lane vector i % kQV. Every loop over the accumulators
        // is one flat loop: g++ 12 left a 2-D array of vectors in memory (a stack copy stored on
        // every iteration of the d loop, half the speed on AVX-512).
        VF acc[kTB * kQV];
        for (size_t i = 0; i < kTB * kQV; ++i) acc[i] = hn::Zero(df);
        const float* kr = kt + tb0 * kD;
        for (size_t d = 0; d < kD; ++d) {
          VF qd[kQV];
          for (size_t v = 0; v < kQV; ++v) qd[v] = hn::Load(df, qt + d * NQ + v * N);
          for (size_t i = 0; i < kTB * kQV; ++i) {
            acc[i] = hn::MulAdd(hn::Set(df, kr[i / kQV * kD + d]), qd[i % kQV], acc[i]);
          }
        }
        // Stored whole (a runtime index into acc would keep it in memory in the loop above).
        for (size_t i = 0; i < kTB * kQV; ++i) hn::Store(acc[i], df, pt + tb0 * NQ + i * N);
        const uint32_t nb = std::min<uint32_t>(kTB, nt - tb0);
        for (uint32_t j = 0; j < nb; ++j) {
          const auto tv = hn::Set(di, static_cast<int32_t>(ta + tb0 + j));
          for (size_t v = 0; v < kQV; ++v) {
            float* px = pt + (tb0 + j) * NQ + v * N;
            VF x = hn::Mul(hn::Load(df, px), vscale);
            if (job.softcap > 0) {
              // cap * tanh(x / cap), tanh(y) = 1 - 2 / (exp(2y) + 1)
              const VF cap = hn::Set(df, job.softcap);
              const VF y = hn::Div(x, cap);
              const VF e = hn::Exp(df, hn::Add(y, y));
              const VF one = hn::Set(df, 1.0f);
              x = hn::Mul(cap, hn::Sub(one, hn::Div(hn::Set(df, 2.0f), hn::Add(e, one))));
            }
            const auto vis = hn::And(hn::Gt(tv, vfirst[v]), hn::Lt(tv, vend[v]));
            x = hn::IfThenElse(hn::RebindMask(df, vis), x, vneg_inf);
            mx[v] = hn::Max(mx[v], x);
            hn::Store(x, df, px);
          }
        }
      }
      // Online softmax on whole vectors. Lanes that saw nothing yet (m = -inf) have l = 0 and
      // O = 0, so their correction may be 0; the selects keep exp's NaN / inf out.
      VF corr[kQV];
      for (size_t v = 0; v < kQV; ++v) {
        corr[v] = hn::IfThenZeroElse(hn::Eq(m[v], vneg_inf), hn::Exp(df, hn::Sub(m[v], mx[v])));
        VF sum = hn::Zero(df);
        for (uint32_t t = 0; t < nt; ++t) {
          float* px = pt + t * NQ + v * N;
          const VF x = hn::Load(df, px);
          const VF p = hn::IfThenElseZero(hn::Gt(x, vneg_inf), hn::Exp(df, hn::Sub(x, mx[v])));
          sum = hn::Add(sum, p);
          hn::Store(p, df, px);
        }
        l[v] = hn::MulAdd(l[v], corr[v], sum);
        m[v] = mx[v];
      }

      // O^T = O^T * corr + sum_t V[t] (broadcast) * P^T[t], kDB dims at a time.
      for (size_t d0 = 0; d0 < kD; d0 += kDB) {
        VF o[kDB * kQV];  // dim i / kQV, lane vector i % kQV; flat loops, as acc above
        for (size_t i = 0; i < kDB * kQV; ++i) {
          o[i] = hn::Mul(hn::Load(df, ot + d0 * NQ + i * N), corr[i % kQV]);
        }
        const size_t line = d0 / kDB * 64;
        const bool pf_k = line < kv.k_head_stride, pf_v = line < kv.v_head_stride;
        for (uint32_t t = 0; t < nt; ++t) {
          if (t < n_next) {
            if (pf_k) __builtin_prefetch(kn + t * kv.k_token_stride + line, 0, 2);
            if (pf_v) __builtin_prefetch(vn + t * kv.v_token_stride + line, 0, 2);
          }
          VF p[kQV];
          for (size_t v = 0; v < kQV; ++v) p[v] = hn::Load(df, pt + t * NQ + v * N);
          const float* vr = vt + t * kD + d0;
          for (size_t i = 0; i < kDB * kQV; ++i) {
            o[i] = hn::MulAdd(hn::Set(df, vr[i / kQV]), p[i % kQV], o[i]);
          }
        }
        for (size_t i = 0; i < kDB * kQV; ++i) hn::Store(o[i], df, ot + d0 * NQ + i * N);
      }
      t0 = t1;
    }
    // {m, l, O} of each query vector into the partials.
    HWY_ALIGN float mv[NQ], lv[NQ];
    for (size_t v = 0; v < kQV; ++v) {
      hn::Store(m[v], df, mv + v * N);
      hn::Store(l[v], df, lv + v * N);
    }
    for (uint32_t i = 0; i < nq; ++i) {
      float* st = partial + ((h - it.head_begin) * nq + i) * kStride;
      st[0] = mv[i];
      st[1] = lv[i];
      for (size_t d = 0; d < kD; ++d) st[2 + d] = ot[d * NQ + i];
    }
  }
}


template <size_t kD>
bool RunPrefillD(const Job& job, const Item& it, float* partial) {
  constexpr size_t N = HWY_LANES(float);
  if constexpr (N < 8 || N % 4 != 0 || (kD / N) % 4 != 0) {
    return false;
  } else {
    const DF df;
    const RowCtx kc = MakeRowLayout(job.kv->k_format, kD), vc = MakeRowLayout(job.kv->v_format, kD);
    // Score tokens / V dims per register block: kBlk x kQV accumulators.
    constexpr size_t kQV = PrefillLaneVectors(N);
    constexpr size_t kBlk = N >= 16 ? 16 : 4;
    return VisitPair<kServeFast>(job.kernel.k, job.kernel.v, [&]<KvCode K, KvCode V>() {
      WithDecoders<K, V>(job.kernel.scale_dtype, [&]<class KDec, class VDec>() {
        RunPrefill<kD, kTile, kBlk, kBlk, kQV, typename EvenOdd<KDec>::Plain, typename EvenOdd<VDec>::Plain>(
            df, job, it, partial, kc, vc);
      });
    });
  }
}

}  // namespace

bool RunItemPrefillImpl(const Job& job, const Item& item, float* partial) {
  switch (job.kernel.head_dim) {
    case 64: return RunPrefillD<64>(job, item, partial);
    case 128: return RunPrefillD<128>(job, item, partial);
    case 256: return RunPrefillD<256>(job, item, partial);
    default: return false;
  }
}

}  // namespace kvtier::attn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvtier::attn {

HWY_EXPORT(RunItemPrefillImpl);

bool RunItemPrefill(const Job& job, const Item& item, float* partial) {
  return HWY_DYNAMIC_DISPATCH(RunItemPrefillImpl)(job, item, partial);
}

}  // namespace kvtier::attn
#endif  // HWY_ONCE
