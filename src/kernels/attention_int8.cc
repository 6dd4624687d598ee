// The int8 q.k path (attention_int8.cc): the query is quantized once per item into two int8
// planes (one scale per 32 values) and q.k runs on the K codes with AVX-512 VNNI dot products.
// Internal to src/kernels; its entry point and Int8QkAvailable are in paths.h, its on / off
// switch in dispatch.h, and dispatch.cc says when it runs.
// Served: K q8_0, q4_0, affine8 and affine4 (f16 scales, groups of 32 or more), V the same
// formats, and rot4 / rot3 / rot2 pairs where the CPU has AVX-512 VBMI too (the pair table in
// dispatch.h), head_dim 64, 128 and 256. Rot codes are read as the fixed-point levels of
// quant/rot.h (RotFixedLevels: bytes u with level = (u - off) / s, within 0.5 / s of the
// codebook), unpacked with vpmultishiftqb and looked up with vpermb, then dotted like q8_0
// codes; the driver has rotated the queries (and rotates the outputs back). Output error
// against the float64 reference on dequantized K/V: relative error < 1e-3 with 8-bit V, < 1e-2
// with 4-bit and rot V (whose softmax weights are rounded to int8; docs/kernels.md states the
// bounds; attention_test.cc tests them).
//
// Per item, each KV head's query vectors are quantized once, 4 at a time ("a pass"), with
// AVX-512: one scale per 32 values (affine: per K scale group) and two int8 planes,
// q = scale * (high + low / 256), laid out to pair byte for byte with the K code bytes.
// Scores come 16 tokens x 4 query vectors per step (int8_qk.h): the 16 rows'
// code pieces are transposed so that each int32 lane holds one row, and `vpdpbusd` against
// broadcast query bytes sums each row in its own lane (high plane, low plane), no horizontal
// reductions; the sums are scaled by the rows' block scales times the query's scale. Code
// offsets (q4_0: 8; q8_0: 128 after xor 0x80) are exact: the dot products start from
// -offset * sum(query codes). Affine biases add bias * sum(q) with the float query. Per tile
// of at most 32 tokens, every head's scores come first, step by step with the heads inside (K
// read in address order), into one small buffer per head and pass; then, head by head, the
// online softmax (scores token-major, 4 query vectors per token) and V: each block's scale is
// folded into the softmax weights, which are rounded per tile (int16 for 8-bit V, summed two
// tokens per `vpdpwssd`; int8 for 4-bit V, four tokens per `vpdpbusd`) and the int32 sums
// scaled into f32 accumulators once per tile (int8_v.h; affine4 V in an even /
// odd value order that is restored when the item ends). Items of every KV head (decode) bring
// the next tile into L2 a line or two at a time over the current tile's score and V work
// (TileDrip); L1 prefetches run a score step ahead (see ScoreStep16).
// Nothing here grows with the context. Stateless apart from the on/off switch; thread-safe.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "kernels/dispatch.h"
#include "kernels/int8_common.h"
#include "kernels/int8_qk.h"
#include "kernels/int8_v.h"
#include "kernels/job.h"
#include "kernels/paths.h"
#include "kernels/prefetch.h"

namespace kvtier::attn {
#if KVTIER_INT8_X86
namespace {
using namespace int8;  // NOLINT: the path's own helpers

bool DetectVnni() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  const bool osxsave = c & (1u << 27), fma = c & (1u << 12), f16c = c & (1u << 29);
  if (!osxsave || !fma || !f16c) return false;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 0xE6) != 0xE6) return false;  // the OS saves xmm, ymm, opmask and zmm state
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const unsigned avx512 = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);  // F DQ BW VL
  const bool avx2_bmi = (b & (1u << 5)) && (b & (1u << 3)) && (b & (1u << 8));
  return (b & avx512) == avx512 && avx2_bmi && (c & (1u << 11));  // AVX512_VNNI
}

bool DetectVbmi() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (c & (1u << 1));  // AVX512_VBMI
}

template <size_t kD, Fmt KF, Fmt VF>
KV_VNNI void RunInt8(const Job& job, const Item& it, float* partial) {
  constexpr size_t kStride = kD + 2;
  const PagedKvView& kv = *job.kv;
  const PagedKvRow& row = kv.rows[it.row];
  const uint32_t G = job.group;
  const uint32_t nq = it.qv_end - it.qv_begin;
  const uint32_t nh = it.head_end - it.head_begin;
  const uint32_t npass = (nq + 3) / 4;
  const Geo kg = MakeRowLayout(kv.k_format, kD), vg = MakeRowLayout(kv.v_format, kD);
  const VScales<kD, VF> vsc = MakeVScales<kD, VF>(vg);
  ItemQueries qs;
  PrepareItem(job, it, kD, partial, &qs);

  std::unique_ptr<QPack<kD>[]> packs(new QPack<kD>[size_t{nh} * npass]);
  for (uint32_t h = 0; h < nh; ++h) {
    const float* qh = job.q + size_t{it.head_begin + h} * G * kD;
    for (uint32_t ps = 0; ps < npass; ++ps) {
      const float* qv[4];
      for (uint32_t g = 0; g < 4; ++g) {
        qv[g] = 4 * ps + g < nq ? qh + qs.q_off[4 * ps + g] : nullptr;
      }
      Quantize<kD, KF>(qv, job.scale, kg, &packs[size_t{h} * npass + ps]);
    }
  }

  const KEntries<kD, KF> kent(kg);

  alignas(64) float dummy[kD] = {};
  const uint32_t bt = kv.block_tokens;
  const size_t ks = kv.k_token_stride, vs = kv.v_token_stride;
  // Per tile: first the scores of every head and pass, a 16-token step at a time with the heads
  // inside, so that K is read in address order (the rows of a step are one contiguous stretch
  // of the block) and the hardware prefetchers stream it; then softmax and V head by head.
  // The next tile goes into L2 over the whole of this one (TileDrip: bursts of it, or a drip
  // during the score steps alone, were slower); L1 prefetches bring the next step's K rows
  // (and, where the tile's V rows were not dripped, this step's V rows) a step ahead.
  struct alignas(64) TileScores {
    float s[kTile * 4];  // [token][query vector of the pass]
  };
  struct PassMask {
    alignas(16) int32_t a[4];  // query g sees keys [a[g], b[g]) of the tile
    alignas(16) int32_t b[4];
    uint32_t lo = 0, hi = 0;   // union of the ranges
    bool whole = false;        // 4 queries that all see the whole tile, of whole quads
  };
  bool v_in_l2 = false;  // this tile's V rows were dripped into L2 during the tile before
  std::unique_ptr<TileScores[]> sc(new TileScores[size_t{nh} * npass]);  // [head][pass]
  std::unique_ptr<PassMask[]> masks(new PassMask[npass]);
  const size_t khs = kv.k_head_stride, vhs = kv.v_head_stride;
  for (uint32_t t0 = qs.lo; t0 < qs.hi;) {
    const uint32_t t1 = std::min({qs.hi, (t0 / bt + 1) * bt, t0 + kTile});
    const uint32_t nt = t1 - t0;
    const size_t block = static_cast<size_t>(row.block_table[t0 / bt]);
    const size_t slot = t0 % bt;
    const NextTile next = PlanNextTile(kv, row, it, t1, qs.hi, kTile);
    const uint32_t n_next = next.n;
    // Rows of the item's first head in this tile.
    const uint8_t* kt = kv.k_base + block * kv.block_stride + slot * ks + it.head_begin * khs;
    const uint8_t* vt = kv.v_base + block * kv.block_stride + slot * vs + it.head_begin * vhs;
    bool any = false;
    for (uint32_t ps = 0; ps < npass; ++ps) {
      PassMask& pm = masks[ps];
      const uint32_t i0 = 4 * ps;
      const uint32_t nqp = std::min<uint32_t>(4, nq - i0);
      pm.lo = t1;
      pm.hi = t0;
      pm.whole = nqp == 4 && nt % 4 == 0;
      for (uint32_t g = 0; g < 4; ++g) {
        pm.a[g] = pm.b[g] = 0;
        if (g >= nqp) continue;
        const uint32_t ag = std::max(t0, qs.first[i0 + g]);
        const uint32_t bg = std::min(t1, qs.pos[i0 + g] + 1);
        pm.whole = pm.whole && ag == t0 && bg == t1;
        if (ag >= bg) continue;
        pm.a[g] = static_cast<int32_t>(ag);
        pm.b[g] = static_cast<int32_t>(bg);
        pm.lo = std::min(pm.lo, ag);
        pm.hi = std::max(pm.hi, bg);
      }
      any = any || pm.lo < pm.hi;
    }
    if (!any) {
      v_in_l2 = false;  // what the tile before dripped was this tile, not the next
      t0 = t1;
      continue;
    }
    // Scores, 16 tokens x 4 query vectors per step, token-major in sc. An item of every KV head
    // reads whole token rows: the prefetches are then lines of contiguous ranges.
    const bool all_heads = nh * khs == ks && nh * vhs == vs;
    // Items of every KV head: the next tile into L2 over this one's score and V slots (a
    // share of the lines per slot). Items of fewer heads (prefill, strided rows) and an item's
    // last tile run the instantiations without it; a tile whose V rows were not dripped gets
    // them by L1 prefetches a step ahead.
    TileDrip drip;
    if (all_heads && n_next > 0) {
      uint64_t passes = 0;
      for (uint32_t ps = 0; ps < npass; ++ps) passes += masks[ps].lo < masks[ps].hi ? 1 : 0;
      const uint64_t score_slots = uint64_t{(nt + 15) / 16} * nh * passes * (kD / 32) * 4;
      const uint64_t v_slots = uint64_t{nh} * passes * (kD / 64) * ((nt + 1) / 2);
      drip.p = next.k;
      drip.left = static_cast<uint32_t>((n_next * ks + 63) / 64);
      drip.p2 = next.v;
      drip.left2 = static_cast<uint32_t>((n_next * vs + 63) / 64);
      const uint64_t slots = score_slots + v_slots;
      drip.rate = static_cast<uint32_t>(((uint64_t{drip.left + drip.left2} << 16) + slots - 1) / slots);
    }
    const bool dripping = drip.rate > 0;  // else the instantiations without it
    TileDrip sdrip = drip;  // the score steps' copy: its address stays here (registers)
    for (uint32_t t = t0; t < t1; t += 16) {
      const uint32_t ntb = std::min<uint32_t>(16, t1 - t);
      alignas(64) int32_t rel[16];  // rows from the head's first row of the tile
      for (uint32_t j = 0; j < 16; ++j) rel[j] = static_cast<int32_t>(t - t0 + std::min(j, ntb - 1));
      // The next step's K rows: this tile's, else the next tile's first ones.
      const uint8_t* kn = nullptr;
      uint32_t n_kn = 0, kn_first = 0;
      if (t + 16 < t1) {
        kn = kt;
        kn_first = t - t0 + 16;
        n_kn = std::min<uint32_t>(16, t1 - t - 16);
      } else if (n_next > 0) {
        kn = next.k;
        n_kn = std::min<uint32_t>(16, n_next);
      }
      const uint32_t k_lines = kn ? static_cast<uint32_t>((n_kn * ks + 63) / 64) : 0;
      const uint32_t v_lines = v_in_l2 ? 0 : static_cast<uint32_t>((ntb * vs + 63) / 64);
      const uint8_t* vstep = vt + size_t{t - t0} * vs;
      for (uint32_t h = 0; h < nh; ++h) {
        const uint8_t* kb = kt + h * khs;
        const uint8_t* r[16];
        for (uint32_t j = 0; j < 16; ++j) r[j] = kb + static_cast<size_t>(rel[j]) * ks;
        L1Ahead ahead;
        if (all_heads) {  // a share of each range per head
          ahead.lines = true;
          const uint32_t k0 = k_lines * h / nh, v0 = v_lines * h / nh;
          ahead.kl = kn ? kn + size_t{kn_first} * ks + 64 * size_t{k0} : nullptr;
          ahead.n_kl = k_lines * (h + 1) / nh - k0;
          ahead.vl = vstep + 64 * size_t{v0};
          ahead.n_vl = v_lines * (h + 1) / nh - v0;
        } else {
          ahead.kbytes = kn ? khs : 0;
          ahead.vbytes = vhs;
          for (uint32_t j = 0; j < 16; ++j) {
            ahead.k[j] = kn ? kn + h * khs + size_t{kn_first + std::min(j, n_kn - 1)} * ks : nullptr;
            ahead.v[j] = vt + h * vhs + static_cast<size_t>(rel[j]) * vs;
          }
        }
        for (uint32_t ps = 0; ps < npass; ++ps) {
          if (masks[ps].lo >= masks[ps].hi) continue;
          const QPack<kD>& qp = packs[size_t{h} * npass + ps];
          float* out = sc[size_t{h} * npass + ps].s + 4 * (t - t0);
          if (dripping) {
            ScoreStep16<kD, KF, true>(r, qp, kent, ahead, &sdrip, kg.group_shift, kg.n_groups, out);
          } else {
            ScoreStep16<kD, KF, false>(r, qp, kent, ahead, &sdrip, kg.group_shift, kg.n_groups, out);
          }
          ahead = L1Ahead{};  // the rows are on their way
        }
      }
    }
    drip = sdrip;
    // Online softmax and V, head by head.
    for (uint32_t h = 0; h < nh; ++h) {
      const uint8_t* vb = vt + h * vhs;
      for (uint32_t ps = 0; ps < npass; ++ps) {
        const PassMask& pm = masks[ps];
        if (pm.lo >= pm.hi) continue;
        const uint32_t i0 = 4 * ps;
        const uint32_t nqp = std::min<uint32_t>(4, nq - i0);
        float* s = sc[size_t{h} * npass + ps].s;
        float m[4], l[4], corr[4];
        float* st[4];
        for (uint32_t g = 0; g < 4; ++g) {
          st[g] = g < nqp ? partial + (size_t{h} * nq + i0 + g) * kStride : nullptr;
          m[g] = st[g] ? st[g][0] : -std::numeric_limits<float>::infinity();
          l[g] = st[g] ? st[g][1] : 0.0f;
        }
        if (pm.whole) {
          Softmax4<false>(s, nt / 4, t0, pm.a, pm.b, job.softcap, m, l, corr);
        } else {
          Softmax4<true>(s, (nt + 3) / 4, t0, pm.a, pm.b, job.softcap, m, l, corr);
        }
        float* acc_ptr[4];
        for (uint32_t g = 0; g < 4; ++g) {
          if (st[g]) {
            st[g][0] = m[g];
            st[g][1] = l[g];
          }
          acc_ptr[g] = st[g] ? st[g] + 2 : dummy;
        }
        const uint8_t* vr = vb + size_t{pm.lo - t0} * vs;
        const float* p = s + 4 * (pm.lo - t0);
        if constexpr (IsRot(VF)) {
          if (dripping) {
            AccumulateVRot<kD, VF, true>(vr, vs, pm.hi - pm.lo, p, corr, acc_ptr, vsc, &drip);
          } else {
            AccumulateVRot<kD, VF, false>(vr, vs, pm.hi - pm.lo, p, corr, acc_ptr, vsc, &drip);
          }
        } else if constexpr (VF == Fmt::kQ4_0 || VF == Fmt::kAffine4) {
          if (dripping) {
            AccumulateV4<kD, VF, true>(vr, vs, pm.hi - pm.lo, p, corr, acc_ptr, vsc, &drip);
          } else {
            AccumulateV4<kD, VF, false>(vr, vs, pm.hi - pm.lo, p, corr, acc_ptr, vsc, &drip);
          }
        } else if (dripping) {
          AccumulateV<kD, VF, true>(vr, vs, pm.hi - pm.lo, p, corr, acc_ptr, vsc, &drip);
        } else {
          AccumulateV<kD, VF, false>(vr, vs, pm.hi - pm.lo, p, corr, acc_ptr, vsc, &drip);
        }
      }
    }
    v_in_l2 = dripping;
    t0 = t1;
  }
  // Accumulators back to value order: float 16 c + d of a 32-value block (lane d of chunk c)
  // holds value 2 d + c for affine4 (even / odd) and 8 (d / 4) + 4 c + d % 4 for 8-bit V
  // (VPairCodes' in-lane unpack order) and rot (AccumulateVRot's); q4_0 is in value order.
  if constexpr (VF != Fmt::kQ4_0) {
    for (size_t j = 0; j < size_t{nh} * nq; ++j) {
      float* acc = partial + j * kStride + 2;
      for (size_t p = 0; p < kD; p += 32) {
        float tmp[32];
        std::memcpy(tmp, acc + p, sizeof(tmp));
        for (size_t c = 0; c < 2; ++c) {
          for (size_t d = 0; d < 16; ++d) {
            acc[p + (VF == Fmt::kAffine4 ? 2 * d + c : 8 * (d / 4) + 4 * c + d % 4)] = tmp[16 * c + d];
          }
        }
      }
    }
  }
}

template <size_t kD>
bool RunD(const Job& job, const Item& it, float* partial) {
  return VisitPair<kServeInt8>(job.kernel.k, job.kernel.v, [&]<KvCode K, KvCode V>() {
    RunInt8<kD, K, V>(job, it, partial);
  });
}

}  // namespace

bool Int8QkAvailable() {
  static const bool available = DetectVnni();
  return available;
}

bool Int8RotAvailable() {
  static const bool available = Int8QkAvailable() && DetectVbmi();
  return available;
}

bool RunItemInt8(const Job& job, const Item& it, float* partial) {
  if (!Int8QkAvailable()) return false;
  if ((int8::IsRot(job.kernel.k) || int8::IsRot(job.kernel.v)) && !Int8RotAvailable()) return false;
  switch (job.kernel.head_dim) {
    case 64: return RunD<64>(job, it, partial);
    case 128: return RunD<128>(job, it, partial);
    case 256: return RunD<256>(job, it, partial);
    default: return false;
  }
}

#else  // !KVTIER_INT8_X86

bool Int8QkAvailable() { return false; }
bool Int8RotAvailable() { return false; }
bool RunItemInt8(const Job&, const Item&, float*) { return false; }

#endif  // KVTIER_INT8_X86

}  // namespace kvtier::attn
