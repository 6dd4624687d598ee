// The fast attention path (f32, decode items): rows are decoded in registers, N values ("a
// chunk") at a time, by a decoder per code layout (decoders-inl.h): no f32 copy of K or V.
// Scores come 4 query vectors x N/4 tokens at a time (N FMA chains, one batched reduction); each
// V chunk is decoded once per token and feeds 4 query vectors' accumulators. Serves the pair
// table's kServeFast rows where N is a multiple of 4 and head_dim / N a multiple of 4 (head_dim
// 64, 128, 256; dispatch.cc); the generic path serves the rest. Compiled for every Highway
// target and dispatched at run time. Values equal the quant module's decoders (and so the
// reference) bit for bit. Stateless; thread-safe.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/attention_fast.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/decoders-inl.h"
#include "kernels/job.h"
#include "kernels/paths.h"
#include "kernels/prefetch.h"
#include "kernels/softmax-inl.h"
#include "simd/reduce-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvtier::attn::HWY_NAMESPACE {
namespace {
namespace hn = hwy::HWY_NAMESPACE;

constexpr uint32_t kTile = 32;

template <size_t kD, class KDec, class VDec>
void RunFast(const Job& job, const Item& it, float* partial) {
  const DF df;
  constexpr size_t N = HWY_LANES(float);
  constexpr size_t V = kD / N;    // chunks per row
  constexpr size_t kQG = 4;       // query vectors per pass
  constexpr size_t kTB = N / kQG;  // tokens per score batch
  // V chunks per accumulator pass: kQG x kCG accumulators must leave registers for the decoded
  // chunks (16 vector registers below AVX-512).
  constexpr size_t kCG = N >= 16 ? 4 : 2;
  // Drip steps (see the tile loop): fine on AVX-512, per score batch / V chunk group below.
  constexpr bool kFine = N >= 16;
  static_assert(N % kQG == 0 && V % kCG == 0, "fast path geometry");
  constexpr size_t kStride = kD + 2;
  const PagedKvView& kv = *job.kv;
  const PagedKvRow& row = kv.rows[it.row];
  const uint32_t G = job.group;
  const uint32_t nq = it.qv_end - it.qv_begin;
  const RowCtx kc = MakeRowLayout(kv.k_format, kD), vc = MakeRowLayout(kv.v_format, kD);
  ItemQueries qs;
  PrepareItem(job, it, kD, partial, &qs);
  const uint32_t* pos = qs.pos;
  const uint32_t* first = qs.first;
  const size_t* q_off = qs.q_off;
  const uint32_t lo = qs.lo, hi = qs.hi;

  // K in even / odd order: the item's query vectors in that order too ([head][query][kD]).
  constexpr bool kKEO = EvenOdd<KDec>::value, kVEO = EvenOdd<VDec>::value;
  std::vector<float> q_eo;
  if constexpr (kKEO) {
    q_eo.resize(size_t{it.head_end - it.head_begin} * nq * kD);
    for (uint32_t h = it.head_begin; h < it.head_end; ++h) {
      for (uint32_t i = 0; i < nq; ++i) {
        ToEvenOdd(df, job.q + size_t{h} * G * kD + q_off[i],
                  q_eo.data() + (size_t{h - it.head_begin} * nq + i) * kD, kD);
      }
    }
  }
  HWY_ALIGN float s[kQG][kTile + N];  // scores, then probabilities, per query vector of a pass
  HWY_ALIGN float lanes[N];
  HWY_ALIGN float zero_q[kD] = {};     // stands in for missing query vectors of a pass
  HWY_ALIGN float dummy[kD] = {};      // their (discarded) accumulators
  const VF vscale = hn::Set(df, job.scale);
  const uint32_t bt = kv.block_tokens;
  const uint32_t nh = it.head_end - it.head_begin;
  const uint32_t npass = (nq + kQG - 1) / kQG;
  Drip kdrip, vdrip;  // the next tile's K (during the scores) and V (during the V sums)
  for (uint32_t t0 = lo; t0 < hi;) {
    const uint32_t t1 = std::min({hi, (t0 / bt + 1) * bt, t0 + kTile});
    const uint32_t nt = t1 - t0;
    const size_t block = static_cast<size_t>(row.block_table[t0 / bt]);
    const size_t slot = t0 % bt;
    {
      // AVX-512: fine steps, a line or two per K chunk pair and per V token. One step per
      // 4-token score batch and per V chunk group (16 and 64 lines at f16) held the Intel
      // device's fill buffers in bursts (1.1-1.2x slower at 32K). On the AMD AVX2 machine the
      // fine steps were 1.1x slower (and the K step costs the scores' registers): coarse there.
      const uint64_t k_steps = uint64_t{nh} * npass * ((nt + kTB - 1) / std::max<size_t>(kTB, 1)) *
                               (kFine ? V / 2 : 1);
      const uint64_t v_steps = uint64_t{nh} * npass * (V / kCG) * (kFine ? nt : 1);
      const NextTile next = PlanNextTile(kv, row, it, t1, hi, kTile);
      kdrip.Plan(next.k, next.n, kv.k_token_stride, nh * kv.k_head_stride, k_steps);
      vdrip.Plan(next.v, next.n, kv.v_token_stride, nh * kv.v_head_stride, v_steps);
    }
    for (uint32_t h = it.head_begin; h < it.head_end; ++h) {
      const uint8_t* kb = kv.k_base + block * kv.block_stride + slot * kv.k_token_stride +
                          h * kv.k_head_stride;
      const uint8_t* vb = kv.v_base + block * kv.block_stride + slot * kv.v_token_stride +
                          h * kv.v_head_stride;
      const float* qh = job.q + size_t{h} * G * kD;
      for (uint32_t i0 = 0; i0 < nq; i0 += kQG) {
        const uint32_t nqp = std::min<uint32_t>(kQG, nq - i0);
        // Visible keys of the pass.
        uint32_t a = t1, b = t0;
        for (uint32_t g = 0; g < nqp; ++g) {
          a = std::min(a, std::max(t0, first[i0 + g]));
          b = std::max(b, std::min(t1, pos[i0 + g] + 1));
        }
        if (a >= b) continue;
        const float* qv[kQG];
        for (size_t g = 0; g < kQG; ++g) {
          if constexpr (kKEO) {
            qv[g] = g < nqp ? q_eo.data() + (size_t{h - it.head_begin} * nq + i0 + g) * kD : zero_q;
          } else {
            qv[g] = g < nqp ? qh + q_off[i0 + g] : zero_q;
          }
        }
        // Scores: accumulator j = g * kTB + tt holds q_g . k_(t + tt).
        for (uint32_t t = t0; t < t1; t += kTB) {
          if constexpr (!kFine) kdrip.Step();
          VF acc[N];
          for (size_t j = 0; j < N; ++j) acc[j] = hn::Zero(df);
          const uint32_t ntb = std::min<uint32_t>(kTB, t1 - t);
          const uint8_t* kr[kTB];
          for (size_t tt = 0; tt < kTB; ++tt) {
            kr[tt] = kb + (t - t0 + std::min<size_t>(tt, ntb - 1)) * kv.k_token_stride;
          }
          for (size_t k = 0; k < V; k += 2) {
            if constexpr (kFine) kdrip.StepFine();
            VF k0[kTB], k1[kTB];
            for (size_t tt = 0; tt < kTB; ++tt) KDec::Pair(df, kr[tt], k, kc, k0[tt], k1[tt]);
            for (size_t g = 0; g < kQG; ++g) {
              const VF qa = hn::LoadU(df, qv[g] + k * N);
              const VF qb = hn::LoadU(df, qv[g] + (k + 1) * N);
              for (size_t tt = 0; tt < kTB; ++tt) {
                acc[g * kTB + tt] = hn::MulAdd(qb, k1[tt], hn::MulAdd(qa, k0[tt], acc[g * kTB + tt]));
              }
            }
          }
          hn::Store(hn::Mul(kvtier::HWY_NAMESPACE::SumBatch(df, acc), vscale), df, lanes);
          for (size_t g = 0; g < kQG; ++g) {
            for (size_t tt = 0; tt < kTB; ++tt) s[g][t - t0 + tt] = lanes[g * kTB + tt];
          }
        }
        // Online softmax per query vector, N keys at a time.
        const uint32_t nt_pad = static_cast<uint32_t>((nt + N - 1) / N * N);
        float corr[kQG];
        for (uint32_t g = 0; g < nqp; ++g) {
          float* st = partial + ((h - it.head_begin) * nq + i0 + g) * kStride;
          corr[g] = SoftmaxStep(df, s[g], nt_pad, t0, std::max(t0, first[i0 + g]),
                                std::min(t1, pos[i0 + g] + 1), job.softcap, st);
        }
        for (uint32_t g = nqp; g < kQG; ++g) {
          corr[g] = 1.0f;
          for (uint32_t c = 0; c < nt_pad; ++c) s[g][c] = 0.0f;
        }
        // Weighted V: kQG x kCG accumulators per pass over kCG chunks.
        float* acc_ptr[kQG];
        for (size_t g = 0; g < kQG; ++g) {
          acc_ptr[g] = g < nqp ? partial + ((h - it.head_begin) * nq + i0 + g) * kStride + 2 : dummy;
        }
        for (size_t c0 = 0; c0 < V; c0 += kCG) {
          if constexpr (!kFine) vdrip.Step();
          VF o[kQG][kCG];
          for (size_t g = 0; g < kQG; ++g) {
            const VF cg = hn::Set(df, corr[g]);
            for (size_t c = 0; c < kCG; ++c) o[g][c] = hn::Mul(hn::LoadU(df, acc_ptr[g] + (c0 + c) * N), cg);
          }
#pragma GCC unroll 2
          for (uint32_t t = a; t < b; ++t) {
            if constexpr (kFine) vdrip.StepFine();
            const uint8_t* vr = vb + (t - t0) * kv.v_token_stride;
            VF vv[kCG];
            for (size_t c = 0; c < kCG; c += 2) VDec::Pair(df, vr, c0 + c, vc, vv[c], vv[c + 1]);
            for (size_t g = 0; g < kQG; ++g) {
              const VF pg = hn::Set(df, s[g][t - t0]);
              for (size_t c = 0; c < kCG; ++c) o[g][c] = hn::MulAdd(pg, vv[c], o[g][c]);
            }
          }
          for (size_t g = 0; g < kQG; ++g) {
            for (size_t c = 0; c < kCG; ++c) hn::StoreU(o[g][c], df, acc_ptr[g] + (c0 + c) * N);
          }
        }
      }
    }
    kdrip.Finish();
    vdrip.Finish();
    t0 = t1;
  }
  if constexpr (kVEO) {  // accumulators back from even / odd to value order
    for (size_t j = 0; j < size_t{it.head_end - it.head_begin} * nq; ++j) {
      FromEvenOdd(df, partial + j * kStride + 2, kD);
    }
  }
}

template <size_t kD>
bool RunFastD(const Job& job, const Item& it, float* partial) {
  constexpr size_t N = HWY_LANES(float);
  if constexpr (N % 4 != 0 || (kD / N) % 4 != 0) {
    return false;
  } else {
    return VisitPair<kServeFast>(job.kernel.k, job.kernel.v, [&]<KvCode K, KvCode V>() {
      WithDecoders<K, V>(job.kernel.scale_dtype, [&]<class KDec, class VDec>() {
        RunFast<kD, KDec, VDec>(job, it, partial);
      });
    });
  }
}

}  // namespace

bool RunItemFastImpl(const Job& job, const Item& item, float* partial) {
  switch (job.kernel.head_dim) {
    case 64: return RunFastD<64>(job, item, partial);
    case 128: return RunFastD<128>(job, item, partial);
    case 256: return RunFastD<256>(job, item, partial);
    default: return false;
  }
}

}  // namespace kvtier::attn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvtier::attn {

HWY_EXPORT(RunItemFastImpl);

bool RunItemFast(const Job& job, const Item& item, float* partial) {
  return HWY_DYNAMIC_DISPATCH(RunItemFastImpl)(job, item, partial);
}

}  // namespace kvtier::attn
#endif  // HWY_ONCE
