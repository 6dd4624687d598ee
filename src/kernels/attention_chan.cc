// The chan path: per-channel token-grouped K (chan<bits>g<G>, quant/chan.h) read in place,
// decode and prefill items, with AVX-512 VNNI (3- and 2-bit codes and rot V with VBMI too).
// Internal to src/kernels; its entry point is in paths.h, ChanPathServes in dispatch.h.
// Served: K chan2 / chan3 / chan4 (groups of 32, 64, 128 tokens), V q8_0, q4_0, rot4, rot3,
// rot2, head_dim 64, 128 and 256.
//
// The item loop is the int8 path's (attention_int8.cc): tiles of at most 32 tokens (here also
// inside one K group), scores of every head 16 tokens x 4 query vectors per step, then online
// softmax and V head by head with int8_v.h's weighted-V kernels, the next tile dripped into L2
// over the current one. The score side is chan_qk.h: when a tile starts a new group, each head's
// group parameters are decoded once and each pass's queries folded into them (w = q * scale,
// q . min; once per group and query vector, shared by every token of the group), so a score
// is (q . min) + sq * (codes . quantized w): raw codes into `vpdpbusd`, no per-token scale.
// Output error against the float64 reference on dequantized K/V: that of the int8 path with the
// same V (the query side's two int8 planes are as precise as its; attention_chan_test.cc).
// Nothing here grows with the context. Stateless; thread-safe.
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>

#include "kernels/chan_qk.h"
#include "kernels/dispatch.h"
#include "kernels/int8_common.h"
#include "kernels/int8_v.h"
#include "kernels/job.h"
#include "kernels/paths.h"
#include "kernels/prefetch.h"

namespace kvtier::attn {
#if KVTIER_INT8_X86
namespace {
using namespace int8;  // NOLINT: the int8 path's helpers
using chan::BuildChanPack;
using chan::ChanPack;
using chan::ChanParams;

template <size_t kD, int kBits, Fmt VF>
KV_VNNI void RunChan(const Job& job, const Item& it, float* partial) {
  constexpr size_t kStride = kD + 2;
  const PagedKvView& kv = *job.kv;
  const PagedKvRow& row = kv.rows[it.row];
  const uint32_t G = job.group;
  const uint32_t nq = it.qv_end - it.qv_begin;
  const uint32_t nh = it.head_end - it.head_begin;
  const uint32_t npass = (nq + 3) / 4;
  const uint32_t kgroup = kv.k_format.group;  // tokens per K group (divides block_tokens)
  const Geo vg = MakeRowLayout(kv.v_format, kD);
  const VScales<kD, VF> vsc = MakeVScales<kD, VF>(vg);
  ItemQueries qs;
  PrepareItem(job, it, kD, partial, &qs);

  // [head][pass]: the current group's packs (rebuilt when a tile starts a new group).
  std::unique_ptr<ChanPack<kD>[]> packs(new ChanPack<kD>[size_t{nh} * npass]);
  std::unique_ptr<ChanParams<kD>> params(new ChanParams<kD>);
  uint32_t packed_group = UINT32_MAX;

  alignas(64) float dummy[kD] = {};
  const uint32_t bt = kv.block_tokens;
  const size_t ks = kv.k_token_stride, vs = kv.v_token_stride;
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
  uint32_t k_dripped = 0;  // K rows before this token were dripped into L2
  std::unique_ptr<TileScores[]> sc(new TileScores[size_t{nh} * npass]);  // [head][pass]
  std::unique_ptr<PassMask[]> masks(new PassMask[npass]);
  const size_t khs = kv.k_head_stride, vhs = kv.v_head_stride;
  for (uint32_t t0 = qs.lo; t0 < qs.hi;) {
    const uint32_t t1 = std::min({qs.hi, (t0 / kgroup + 1) * kgroup, t0 + kTile});
    const uint32_t nt = t1 - t0;
    const size_t block = static_cast<size_t>(row.block_table[t0 / bt]);
    const size_t slot = t0 % bt;
    const NextTile next = PlanNextTile(kv, row, it, t1, qs.hi, kTile);
    const uint32_t n_next = next.n;
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
      v_in_l2 = false;
      t0 = t1;
      continue;
    }
    // A new K group: its parameters per head, folded into each pass's queries.
    if (t0 / kgroup != packed_group) {
      packed_group = t0 / kgroup;
      const uint8_t* g0 = kt - size_t{slot % kgroup} * ks;  // the group's first row, first head
      for (uint32_t h = 0; h < nh; ++h) {
        chan::LoadChanParams<kD>(g0 + h * khs, ks, kBits, kgroup, params.get());
        const float* qh = job.q + size_t{it.head_begin + h} * G * kD;
        for (uint32_t ps = 0; ps < npass; ++ps) {
          const float* qv[4];
          for (uint32_t g = 0; g < 4; ++g) qv[g] = 4 * ps + g < nq ? qh + qs.q_off[4 * ps + g] : nullptr;
          BuildChanPack<kD, kBits>(qv, job.scale, *params, &packs[size_t{h} * npass + ps]);
        }
      }
    }
    const bool all_heads = nh * khs == ks && nh * vhs == vs;
    TileDrip drip;
    if (all_heads && n_next > 0) {
      uint64_t passes = 0;
      for (uint32_t ps = 0; ps < npass; ++ps) passes += masks[ps].lo < masks[ps].hi ? 1 : 0;
      const uint64_t score_slots = uint64_t{(nt + 15) / 16} * nh * passes * (kD / 32) * 4;
      const uint64_t v_slots = uint64_t{nh} * passes * (kD / 64) * ((nt + 1) / 2);
      // K: when the next tile starts a group, its whole group (the parameters at its start
      // read a slice of every row of the group: from DRAM they cost a quarter of the item).
      const uint32_t k_from = std::max(t1, k_dripped);
      const uint32_t k_to = t1 % kgroup == 0 ? std::min(qs.hi, t1 + kgroup) : t1 + n_next;
      if (k_from < k_to) {
        drip.p = kv.k_base + static_cast<size_t>(row.block_table[k_from / bt]) * kv.block_stride +
                 size_t{k_from % bt} * ks + it.head_begin * khs;
        drip.left = static_cast<uint32_t>((size_t{k_to - k_from} * ks + 63) / 64);
        k_dripped = k_to;
      }
      drip.p2 = next.v;
      drip.left2 = static_cast<uint32_t>((n_next * vs + 63) / 64);
      if (drip.left == 0) {  // K already on its way: V alone
        drip.p = drip.p2;
        drip.left = drip.left2;
        drip.left2 = 0;
      }
      const uint64_t slots = score_slots + v_slots;
      drip.rate = static_cast<uint32_t>(((uint64_t{drip.left + drip.left2} << 16) + slots - 1) / slots);
    }
    const bool dripping = drip.rate > 0;
    TileDrip sdrip = drip;
    for (uint32_t t = t0; t < t1; t += 16) {
      const uint32_t ntb = std::min<uint32_t>(16, t1 - t);
      alignas(64) int32_t rel[16];
      for (uint32_t j = 0; j < 16; ++j) rel[j] = static_cast<int32_t>(t - t0 + std::min(j, ntb - 1));
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
        if (all_heads) {
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
          const ChanPack<kD>& pk = packs[size_t{h} * npass + ps];
          float* out = sc[size_t{h} * npass + ps].s + 4 * (t - t0);
          if (dripping) {
            chan::ChanScoreStep16<kD, kBits, true>(r, pk, ahead, &sdrip, out);
          } else {
            chan::ChanScoreStep16<kD, kBits, false>(r, pk, ahead, &sdrip, out);
          }
          ahead = L1Ahead{};
        }
      }
    }
    drip = sdrip;
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
        } else if constexpr (VF == Fmt::kQ4_0) {
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
  // Accumulators back to value order (as RunInt8: q8_0 and rot V in the in-lane unpack order,
  // q4_0 in value order).
  if constexpr (VF != Fmt::kQ4_0) {
    for (size_t j = 0; j < size_t{nh} * nq; ++j) {
      float* acc = partial + j * kStride + 2;
      for (size_t p = 0; p < kD; p += 32) {
        float tmp[32];
        std::memcpy(tmp, acc + p, sizeof(tmp));
        for (size_t c = 0; c < 2; ++c) {
          for (size_t d = 0; d < 16; ++d) acc[p + 8 * (d / 4) + 4 * c + d % 4] = tmp[16 * c + d];
        }
      }
    }
  }
}

template <size_t kD, int kBits>
bool RunBits(const Job& job, const Item& it, float* partial) {
  switch (job.kernel.v) {
    case Fmt::kQ8_0: RunChan<kD, kBits, Fmt::kQ8_0>(job, it, partial); return true;
    case Fmt::kQ4_0: RunChan<kD, kBits, Fmt::kQ4_0>(job, it, partial); return true;
    case Fmt::kRot4: RunChan<kD, kBits, Fmt::kRot4>(job, it, partial); return true;
    case Fmt::kRot3: RunChan<kD, kBits, Fmt::kRot3>(job, it, partial); return true;
    case Fmt::kRot2: RunChan<kD, kBits, Fmt::kRot2>(job, it, partial); return true;
    default: return false;
  }
}

template <size_t kD>
bool RunD(const Job& job, const Item& it, float* partial) {
  switch (job.kv->k_format.bits) {
    case 4: return RunBits<kD, 4>(job, it, partial);
    case 3: return RunBits<kD, 3>(job, it, partial);
    case 2: return RunBits<kD, 2>(job, it, partial);
    default: return false;
  }
}

}  // namespace

bool RunItemChan(const Job& job, const Item& it, float* partial) {
  if (!ChanPathServes(job.kv->k_format, job.kv->v_format, job.kernel.head_dim,
                      CpuFeatures{.float_lanes = 16, .x86_avx3 = true, .vnni = Int8QkAvailable(),
                                  .vbmi = Int8RotAvailable()})) {
    return false;
  }
  switch (job.kernel.head_dim) {
    case 64: return RunD<64>(job, it, partial);
    case 128: return RunD<128>(job, it, partial);
    case 256: return RunD<256>(job, it, partial);
    default: return false;
  }
}

#else  // !KVTIER_INT8_X86

bool RunItemChan(const Job&, const Item&, float*) { return false; }

#endif  // KVTIER_INT8_X86

// Which chan pairs the path serves on this CPU (dispatch.h).
bool ChanPathServes(const Format& k, const Format& v, uint32_t head_dim, const CpuFeatures& cpu) {
#if KVTIER_INT8_X86
  if (k.kind != FormatKind::kChan || !cpu.x86_avx3 || !cpu.vnni || !cpu.int8_enabled) return false;
  if (head_dim != 64 && head_dim != 128 && head_dim != 256) return false;
  const KvCode vc = CodeOf(v);
  const bool rot_v = vc == KvCode::kRot4 || vc == KvCode::kRot3 || vc == KvCode::kRot2;
  if (!rot_v && vc != KvCode::kQ8_0 && vc != KvCode::kQ4_0) return false;
  if ((k.bits != 4 || rot_v) && !cpu.vbmi) return false;  // vpmultishiftqb / vpermb
  return k.bits >= 2 && k.bits <= 4;
#else
  (void)k, (void)v, (void)head_dim, (void)cpu;
  return false;
#endif
}

}  // namespace kvtier::attn
