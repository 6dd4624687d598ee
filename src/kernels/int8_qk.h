// Score side of the int8 q.k path (attention_int8.cc), on int8_common.h's Fmt, Geo, KTraits,
// QPack, Load4 and DpBusdBcast. Internal to src/kernels, for attention_int8.cc only.
// Stateless; thread-safe.
//
// Scores come 16 tokens x 4 query vectors per step. For each 16-byte piece of a 32-value
// sub-block, the 16 rows' pieces are loaded 4 to a zmm (one 128-bit lane per row) and transposed
// in-lane (4x4 dwords), so that each zmm holds bytes 4k .. 4k + 3 of the piece for all 16 rows,
// one row per int32 lane. `vpdpbusd` against the query's bytes 4k .. 4k + 3 broadcast to every
// lane (an embedded broadcast) then sums a row's products straight into its lane: no horizontal
// reductions. Per sub-block (affine: per scale group) and query vector, two chains (high and low
// plane) give 256 * high + low, scaled by the 16 rows' block scales (also transposed into the
// same lane order) times the query's scale. Lane 4 j + i holds row 4 i + j; one more in-lane
// transpose leaves the 16 x 4 scores token-major.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/int8_common.h"

#if KVTIER_INT8_X86
namespace kvtier::attn::int8 {

// In-lane 4x4 transpose of dwords: out[k], 128-bit lane l, dword i = in[i], lane l, dword k.
KV_INL void Transpose4(const __m512i in[4], __m512i out[4]) {
  const __m512i t0 = _mm512_unpacklo_epi32(in[0], in[1]);
  const __m512i t1 = _mm512_unpackhi_epi32(in[0], in[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(in[2], in[3]);
  const __m512i t3 = _mm512_unpackhi_epi32(in[2], in[3]);
  out[0] = _mm512_unpacklo_epi64(t0, t2);
  out[1] = _mm512_unpackhi_epi64(t0, t2);
  out[2] = _mm512_unpacklo_epi64(t1, t3);
  out[3] = _mm512_unpackhi_epi64(t1, t3);
}

// Where a K row's scale entries are (q formats: one f16 per sub-block; affine: the scales, then
// the biases) and how 4 rows' entries are fetched: built once per item.
template <size_t kD, Fmt KF>
struct KEntries {
  using KT = KTraits<KF>;
  static constexpr size_t kSb = kD / 32;
  uint32_t n_ent = 0, n_gath = 0;  // entries per row; vectors of 4 rows x 4 entries
  size_t scales_off = 0;
  alignas(64) int32_t ent_off[4][16];  // gather offsets (affine: 2 bytes early, shifted down)
  __m512i q4_idx, q8_idx, q8_shift;

  KV_VNNI explicit KEntries(const Geo& kg) {
    n_ent = KT::kAffine ? 2 * kg.n_groups : static_cast<uint32_t>(kSb);
    n_gath = (n_ent + 3) / 4;
    scales_off = kg.scales_off;
    for (uint32_t q = 0; q < 4; ++q) {
      for (uint32_t l = 0; l < 16; ++l) {
        const uint32_t e = std::min(4 * q + l % 4, n_ent - 1);
        size_t off;
        if constexpr (KT::kAffine) {
          off = (e < kg.n_groups ? kg.scales_off + 2 * e : kg.biases_off + 2 * (e - kg.n_groups)) - 2;
        } else {
          off = BlockBytesOf(KF) * e;
        }
        ent_off[q][l] = static_cast<int32_t>(off);
      }
    }
    // q4_0 scales (word kBlockBytes / 2 x b of a row) of rows A, B into words 4 j + b (j: 0
    // for A, 1 for B) and, for the second pair, 8 + 4 j + b.
    // (Rot formats: the same with their own block size, kBlockWords.)
    constexpr int kQ4Words = static_cast<int>(kBlockWords);
    static_assert(Q4_0Traits::kScaleOffset == 0 && 3 * kQ4Words < 32, "q4_0 scales: words of 64 bytes");
    alignas(64) int16_t q4_words[32];
    for (int w = 0; w < 32; ++w) {
      const int j = (w / 4) % 2, b = std::min<int>(w % 4, static_cast<int>(kSb) - 1);
      q4_words[w] = static_cast<int16_t>(32 * j + kQ4Words * b);
    }
    q4_idx = _mm512_load_si512(q4_words);
    // q8_0 scales (byte kBlockBytes x b of a row, b < 4) as dwords of its first 128 bytes (lo:
    // 0..63, hi: 64..127): 0 and 8 of lo, 1 and 9 of hi; odd blocks' scales are the dword's
    // high half.
    static_assert(Q8_0Traits::kScaleOffset == 0 && Q8_0Traits::kBlockBytes % 4 == 2 &&
                      3 * Q8_0Traits::kBlockBytes / 4 < 32,
                  "q8_0 scales: halves of dwords of 128 bytes");
    auto q8d = [](size_t b) {
      return static_cast<int>(Q8_0Traits::kBlockBytes * std::min<size_t>(b, kSb - 1) / 4);
    };
    q8_idx = _mm512_setr_epi32(q8d(0), q8d(1), q8d(2), q8d(3), q8d(0), q8d(1), q8d(2), q8d(3),
                               q8d(0), q8d(1), q8d(2), q8d(3), q8d(0), q8d(1), q8d(2), q8d(3));
    q8_shift = _mm512_setr_epi32(0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16);
  }

  // 2-byte words per block of q4_0 and the rot formats; whether all of a row's block scales lie
  // in its first 64 bytes (then Rows4 picks them with two word permutes, not a gather).
  static constexpr size_t kBlockWords = IsRot(KF) ? BlockBytesOf(KF) / 2 : Q4_0Traits::kBlockBytes / 2;
  static constexpr bool kPermScales = (KF == Fmt::kQ4_0 || IsRot(KF)) && (kSb - 1) * kBlockWords < 32;
  // Rot rows are read with masks that stop at the row's end (q4_0 reads 64 bytes).
  static constexpr __mmask32 kRowWords =
      kSb * kBlockWords >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((uint64_t{1} << (kSb * kBlockWords)) - 1);

  // Entries of rows r[0..3]: dm[q] lane 4 j + e = entry 4 q + e of row j, as f32.
  KV_INL void Rows4(const uint8_t* const r[4], __m512 dm[4]) const {
    if constexpr (kPermScales && IsRot(KF)) {
      const __m512i w01 = _mm512_permutex2var_epi16(_mm512_maskz_loadu_epi16(kRowWords, r[0]), q4_idx,
                                                    _mm512_maskz_loadu_epi16(kRowWords, r[1]));
      const __m512i w23 = _mm512_permutex2var_epi16(_mm512_maskz_loadu_epi16(kRowWords, r[2]), q4_idx,
                                                    _mm512_maskz_loadu_epi16(kRowWords, r[3]));
      dm[0] = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_mask_blend_epi16(0xFF00, w01, w23)));
    } else if constexpr (kPermScales) {
      // Scales at words kQ4Words x b of each row's first 64 bytes: two 2-row permutes.
      const __m512i w01 = _mm512_permutex2var_epi16(_mm512_loadu_si512(r[0]), q4_idx,
                                                    _mm512_loadu_si512(r[1]));
      const __m512i w23 = _mm512_permutex2var_epi16(_mm512_loadu_si512(r[2]), q4_idx,
                                                    _mm512_loadu_si512(r[3]));
      dm[0] = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_mask_blend_epi16(0xFF00, w01, w23)));
    } else if constexpr (KF == Fmt::kQ8_0 && kD <= 128) {
      // One permute per row (its scales into lanes 4 j + b), merged into row j's lanes.
      __m512i x = _mm512_setzero_si512();
      for (uint32_t j = 0; j < 4; ++j) {
        const __m512i lo = _mm512_loadu_si512(r[j]);
        const __m512i y = kD == 64 ? _mm512_permutexvar_epi32(q8_idx, lo)
                                   : _mm512_permutex2var_epi32(lo, q8_idx, _mm512_loadu_si512(r[j] + 64));
        x = _mm512_mask_mov_epi32(x, static_cast<__mmask16>(0xF << (4 * j)), y);
      }
      dm[0] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srlv_epi32(x, q8_shift)));
    } else {
      if (KT::kAffine && n_ent == 4) {
        // Two scales and two biases, 8 contiguous bytes per row.
        const __m128i x01 = _mm_unpacklo_epi64(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r[0] + scales_off)),
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r[1] + scales_off)));
        const __m128i x23 = _mm_unpacklo_epi64(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r[2] + scales_off)),
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r[3] + scales_off)));
        dm[0] = _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(x01), x23, 1));
        return;
      }
      // Lane 4 j + e: row j's offset from r[0] (the rows of a tile lie within one block).
      const __m512i rowoff = _mm512_permutexvar_epi32(
          _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
          _mm512_castsi128_si512(_mm_setr_epi32(0, static_cast<int>(r[1] - r[0]),
                                                static_cast<int>(r[2] - r[0]),
                                                static_cast<int>(r[3] - r[0]))));
      for (uint32_t q = 0; q < n_gath; ++q) {
        __m512i e = _mm512_i32gather_epi32(_mm512_add_epi32(rowoff, _mm512_load_si512(ent_off[q])),
                                           r[0], 1);
        if constexpr (KT::kAffine) e = _mm512_srli_epi32(e, 16);
        dm[q] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(e));
      }
    }
  }
};

// Bytes 4k .. 4k + 3 of piece p of sub-block sb of rows r[0..15], one row per lane (lane 4 j + i:
// row 4 i + j).
template <Fmt KF>
KV_INL void LoadPiece16(const uint8_t* const r[16], size_t sb, size_t p, __m512i c[4]) {
  __m512i x[4];
  for (uint32_t i = 0; i < 4; ++i) x[i] = Load4(r + 4 * i, KTraits<KF>::PieceOff(sb, p));
  Transpose4(x, c);
}

// A rot block (sub-block sb) of rows r[0..15] as fixed-point level bytes paired like q8_0's
// code pieces: lo[k] / hi[k] lane 4 j + i = the levels of values 4 k .. 4 k + 3 / 16 + 4 k ..
// of row 4 i + j. The codes are transposed as dwords of 8 codes (one row per lane), then each
// dword's codes 0..3 and 4..7 go to bytes (vpmultishiftqb) and to their levels (vpermb).
template <int kBits>
KV_INL void RotPieces16(const uint8_t* const r[16], size_t sb, bool last, const RotConsts<kBits>& rc,
                        __m512i lo[4], __m512i hi[4]) {
  const size_t o = RotBlockBytes(kBits) * sb + 2;
  __m512i x[4], c[4];
  for (uint32_t i = 0; i < 4; ++i) x[i] = RotCodes4<kBits>(r + 4 * i, o, last);
  Transpose4(x, c);
  for (size_t k = 0; k < 2; ++k) {
    lo[2 * k] = PermB(rc.table, MultiShift(rc.ctrl_a, c[k]));
    lo[2 * k + 1] = PermB(rc.table, MultiShift(rc.ctrl_b, c[k]));
    hi[2 * k] = PermB(rc.table, MultiShift(rc.ctrl_a, c[2 + k]));
    hi[2 * k + 1] = PermB(rc.table, MultiShift(rc.ctrl_b, c[2 + k]));
  }
}

// What to bring into L1 during a score step, spread over its sub-blocks (a burst would stall on
// the fill buffers). Either whole lines of two contiguous ranges (`lines`: the next step's K
// rows and, when the tile's V rows were not dripped into L2 during the tile before, this
// step's V rows, of all heads, a share per head) or, for items of fewer heads, the first
// kbytes / vbytes of 16 K rows (the next step's) and 16 V rows (this step's).
struct L1Ahead {
  bool lines = false;
  const uint8_t* kl = nullptr;  // lines mode: first line and count of each range
  const uint8_t* vl = nullptr;
  uint32_t n_kl = 0, n_vl = 0;
  const uint8_t* k[16];  // rows mode
  const uint8_t* v[16];
  size_t kbytes = 0, vbytes = 0;
};

// Sub-block sb of kSb: its share of the prefetches.
KV_INL void PrefetchAhead(const L1Ahead& a, size_t sb, size_t kSb) {
  if (a.lines) {
    for (size_t i = a.n_kl * sb / kSb; i < a.n_kl * (sb + 1) / kSb; ++i) {
      _mm_prefetch(reinterpret_cast<const char*>(a.kl + 64 * i), _MM_HINT_T0);
    }
    for (size_t i = a.n_vl * sb / kSb; i < a.n_vl * (sb + 1) / kSb; ++i) {
      _mm_prefetch(reinterpret_cast<const char*>(a.vl + 64 * i), _MM_HINT_T0);
    }
    return;
  }
  for (size_t j = 16 * sb / kSb; j < 16 * (sb + 1) / kSb; ++j) {
    for (size_t o = 0; o < a.kbytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(a.k[j] + o), _MM_HINT_T0);
    for (size_t o = 0; o < a.vbytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(a.v[j] + o), _MM_HINT_T0);
  }
}

// Scores of rows r[0..15] (16 K rows of one head; duplicates past the tile's end) against the
// pass's 4 query vectors: s[4 t + g] for t < 16 (s: 64 floats, 64-byte aligned).
// With kDrip, `drip` steps once per sub-block and query vector.
template <size_t kD, Fmt KF, bool kDrip>
KV_INL void ScoreStep16(const uint8_t* const r[16], const QPack<kD>& qp,
                        const KEntries<kD, KF>& ke, const L1Ahead& ahead, TileDrip* drip,
                        uint32_t group_shift, uint32_t n_groups, float* s) {
  using KT = KTraits<KF>;
  constexpr size_t kSb = kD / 32;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  [[maybe_unused]] const std::conditional_t<KT::kRot, RotConsts<KT::kRotBits>, NoRotConsts> rot{};
  // Entries of the 16 rows, transposed: ent[e] lane 4 j + i = entry e of row 4 i + j.
  alignas(64) float ent[16][16];
  {
    __m512 dm[4][4];  // [rows 4 i ..][entry vector q]
    for (uint32_t i = 0; i < 4; ++i) ke.Rows4(r + 4 * i, dm[i]);
    for (uint32_t q = 0; q < ke.n_gath; ++q) {
      const __m512i in[4] = {_mm512_castps_si512(dm[0][q]), _mm512_castps_si512(dm[1][q]),
                             _mm512_castps_si512(dm[2][q]), _mm512_castps_si512(dm[3][q])};
      __m512i out[4];
      Transpose4(in, out);
      for (uint32_t e = 0; e < 4; ++e) _mm512_store_si512(ent[4 * q + e], out[e]);
    }
  }
  __m512 sc[4];
  for (size_t g = 0; g < 4; ++g) sc[g] = _mm512_setzero_ps();
  const size_t span = KT::kAffine ? size_t{1} << (group_shift - 5) : 1;
  for (size_t sb0 = 0; sb0 < kSb; sb0 += span) {
    __m512i hacc[4], lacc[4];
    for (size_t g = 0; g < 4; ++g) {
      hacc[g] = KT::kAffine ? _mm512_setzero_si512() : _mm512_set1_epi32(qp.bias_hi[sb0][g]);
      lacc[g] = KT::kAffine ? _mm512_setzero_si512() : _mm512_set1_epi32(qp.bias_low[sb0][g]);
    }
    for (size_t sb = sb0; sb < sb0 + span; ++sb) {
      PrefetchAhead(ahead, sb, kSb);
      __m512i lo[4], hi[4];
      if constexpr (KT::kRot) {
        RotPieces16<KT::kRotBits>(r, sb, sb + 1 == kSb, rot, lo, hi);
      } else if constexpr (KT::kNibble) {
        __m512i c[4];
        LoadPiece16<KF>(r, sb, 0, c);
        for (size_t k = 0; k < 4; ++k) {
          lo[k] = _mm512_and_si512(c[k], low4);
          hi[k] = _mm512_and_si512(_mm512_srli_epi16(c[k], 4), low4);
        }
      } else {
        LoadPiece16<KF>(r, sb, 0, lo);
        LoadPiece16<KF>(r, sb, 1, hi);
        if constexpr (KF == Fmt::kQ8_0) {
          for (size_t k = 0; k < 4; ++k) {
            lo[k] = _mm512_xor_si512(lo[k], flip);
            hi[k] = _mm512_xor_si512(hi[k], flip);
          }
        }
      }
      if constexpr (kDrip) drip->Step(4);  // the 4 query vectors' slots
      // Unrolled, so that hacc / lacc stay in registers: g++ 12 kept this loop rolled (a drip
      // step inside it) and the 8 accumulators in memory, a load and a store per query vector
      // and sub-block (1.03-1.10x on the Intel device, 1.12-1.15x on AMD Zen 5 in session 17).
#pragma GCC unroll 4
      for (size_t g = 0; g < 4; ++g) {
        for (size_t k = 0; k < 4; ++k) {
          hacc[g] = DpBusdBcast(hacc[g], lo[k], &qp.q[sb][0][0][g][4 * k]);
          lacc[g] = DpBusdBcast(lacc[g], lo[k], &qp.q[sb][1][0][g][4 * k]);
        }
        for (size_t k = 0; k < 4; ++k) {
          hacc[g] = DpBusdBcast(hacc[g], hi[k], &qp.q[sb][0][1][g][4 * k]);
          lacc[g] = DpBusdBcast(lacc[g], hi[k], &qp.q[sb][1][1][g][4 * k]);
        }
      }
    }
    const size_t e = KT::kAffine ? (32 * sb0) >> group_shift : sb0;
    const __m512 d = _mm512_load_ps(ent[e]);
    for (size_t g = 0; g < 4; ++g) {
      const __m512i isum = _mm512_add_epi32(_mm512_slli_epi32(hacc[g], 8), lacc[g]);
      sc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, _mm512_set1_ps(qp.sq[sb0][g])), sc[g]);
    }
  }
  if constexpr (KT::kAffine) {
    for (uint32_t gr = 0; gr < n_groups; ++gr) {
      const __m512 bias = _mm512_load_ps(ent[n_groups + gr]);
      for (size_t g = 0; g < 4; ++g) sc[g] = _mm512_fmadd_ps(bias, _mm512_set1_ps(qp.qf[gr][g]), sc[g]);
    }
  }
  const __m512i in[4] = {_mm512_castps_si512(sc[0]), _mm512_castps_si512(sc[1]),
                         _mm512_castps_si512(sc[2]), _mm512_castps_si512(sc[3])};
  __m512i out[4];
  Transpose4(in, out);
  for (uint32_t k = 0; k < 4; ++k) _mm512_store_si512(s + 16 * k, out[k]);
}

}  // namespace kvtier::attn::int8
#endif  // KVTIER_INT8_X86
