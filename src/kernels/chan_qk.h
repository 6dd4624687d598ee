// Score side of the chan path (attention_chan.cc): per-channel token-grouped K
// (quant/chan.h) read in place with AVX-512 VNNI. Internal to src/kernels, for
// attention_chan.cc and its tests only. Stateless; thread-safe.
//
// Within a group (G tokens of one KV head) every channel c has one scale s_c and one min m_c,
// so a query q's score against token t factors as
//   q . k_t = sum_c q_c (m_c + s_c code_ct) = (q . m) + sum_c w_c code_ct,  w_c = q_c s_c.
// Per group and query vector the path computes q . m and w once (ChanPack), quantizes w to two
// int8 planes with one scale (w ~ sq * (256 high + low), as the int8 path does with q) and then
// only dot products of raw codes remain: no per-token scale at all. Scores come 16 tokens x 4
// query vectors per step (ChanScoreStep16), as int8_qk.h's ScoreStep16: 4 rows' 32-channel
// code pieces per zmm, transposed in-lane so that each int32 lane holds one row, then
// `vpdpbusd` against 4 query bytes broadcast. 4-bit codes are split into lo / hi nibble
// vectors (the query bytes interleaved to match); 3- and 2-bit codes are spread to dwords of 8
// codes (RotCodes4), taken 4 at a time into bytes by vpmultishiftqb and masked (AVX-512 VBMI).
// ChanScoresRef is the scalar reference of the same factored arithmetic (tests).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/int8_qk.h"
#include "quant/chan.h"

namespace kvtier::attn::chan {

// The scalar reference: scores (times `scale`) of tokens [0, n) of one group against query q
// (f64 sums of the factored form; codes unpacked from rows `token_stride` bytes apart from
// row0, the group's first row).
inline void ChanScoresRef(const float* q, float scale, const uint8_t* row0, size_t token_stride,
                          int bits, size_t group, size_t head_dim, size_t n, double* out) {
  float s[kChanMaxHeadDim], m[kChanMaxHeadDim];
  ChanLoadParams(row0, token_stride, bits, group, head_dim, s, m);
  double qm = 0;
  for (size_t c = 0; c < head_dim; ++c) qm += double{q[c]} * m[c];
  uint8_t codes[kChanMaxHeadDim];
  for (size_t t = 0; t < n; ++t) {
    ChanUnpack(row0 + t * token_stride, head_dim, bits, codes);
    double acc = qm;
    for (size_t c = 0; c < head_dim; ++c) acc += double{q[c]} * s[c] * codes[c];
    out[t] = acc * scale;
  }
}

}  // namespace kvtier::attn::chan

#if KVTIER_INT8_X86
namespace kvtier::attn::chan {
using int8::DpBusdBcast;
using int8::Load4;
using int8::Transpose4;

// A group's parameters of one KV head, decoded to f32 (64-byte aligned for vector loads).
template <size_t kD>
struct alignas(64) ChanParams {
  float scale[kD];
  float min[kD];
};

// Gathers and decodes one head's group parameters: the slices (4 kD / G bytes) at the end of
// the group's G rows (row0: its first row, rows token_stride bytes apart).
template <size_t kD, size_t kSlice>
KV_INL void GatherSlices(const uint8_t* row0, size_t token_stride, size_t code_bytes, size_t group,
                         uint8_t* p) {
  for (size_t j = 0; j < group; ++j) std::memcpy(p + j * kSlice, row0 + j * token_stride + code_bytes, kSlice);
}
template <size_t kD>
KV_VNNI void LoadChanParams(const uint8_t* row0, size_t token_stride, int bits, size_t group,
                            ChanParams<kD>* out) {
  alignas(64) uint16_t p[2 * kD];
  auto* pb = reinterpret_cast<uint8_t*>(p);
  const size_t cb = ChanCodeBytes(bits, kD);
  switch (ChanSliceBytes(group, kD)) {  // 4 kD / G: 2 .. 32 bytes
    case 2: GatherSlices<kD, 2>(row0, token_stride, cb, group, pb); break;
    case 4: GatherSlices<kD, 4>(row0, token_stride, cb, group, pb); break;
    case 8: GatherSlices<kD, 8>(row0, token_stride, cb, group, pb); break;
    case 16: GatherSlices<kD, 16>(row0, token_stride, cb, group, pb); break;
    default: GatherSlices<kD, 32>(row0, token_stride, cb, group, pb); break;
  }
  for (size_t c = 0; c < 2 * kD; c += 16) {
    const __m512 x = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(p + c)));
    _mm512_store_ps(c < kD ? out->scale + c : out->min + (c - kD), x);
  }
}

// The 4 query vectors of a pass, for one group: w = q * scale * (softmax scale) in two int8
// planes, bytes laid out to pair with the code vectors of ChanScoreStep16 (vector j of
// sub-block sb, byte i: channel 32 sb + (4-bit: 8 (j / 2) + 2 i + j % 2; else 4 j + i)).
template <size_t kD>
struct alignas(64) ChanPack {
  static constexpr size_t kSb = kD / 32;
  int8_t q[kSb][2][4][32];  // [sub-block][plane: high, low][query][byte 4 j + i]
  float sq[4];              // the planes' scale: w ~ sq * (256 high + low)
  float qm[4];              // softmax scale x q . min
};

// Channel (of a 32-channel sub-block) paired with byte p = 4 j + i of its query bytes. For
// 4-bit codes the pairing stays inside each 16-channel half (p < 16: channels 0..15).
constexpr int ChanPairChannel(int bits, int p) {
  const int j = p / 4, i = p % 4;
  return bits == 4 ? 8 * (j / 2) + 2 * i + j % 2 : p;
}

// Builds the pack of up to 4 query vectors (null: absent; its bytes and terms are 0). Per
// query: one pass for w and q . min, one for the planes (16 channels at a time: 4-bit codes'
// pairing as one in-register permute, then high = round(w / step), low = round(256 x
// remainder), both saturated to int8; |high| <= 127 since |w| <= amax).
template <size_t kD, int kBits>
KV_VNNI void BuildChanPack(const float* const qv[4], float scale, const ChanParams<kD>& pr,
                           ChanPack<kD>* pk) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  const __m512i perm = _mm512_setr_epi32(ChanPairChannel(kBits, 0), ChanPairChannel(kBits, 1),
      ChanPairChannel(kBits, 2), ChanPairChannel(kBits, 3), ChanPairChannel(kBits, 4),
      ChanPairChannel(kBits, 5), ChanPairChannel(kBits, 6), ChanPairChannel(kBits, 7),
      ChanPairChannel(kBits, 8), ChanPairChannel(kBits, 9), ChanPairChannel(kBits, 10),
      ChanPairChannel(kBits, 11), ChanPairChannel(kBits, 12), ChanPairChannel(kBits, 13),
      ChanPairChannel(kBits, 14), ChanPairChannel(kBits, 15));
  const __m512 vs = _mm512_set1_ps(scale), k256 = _mm512_set1_ps(256.0f);
  for (size_t g = 0; g < 4; ++g) {
    if (qv[g] == nullptr) {
      for (size_t sb = 0; sb < kD / 32; ++sb) {
        std::memset(pk->q[sb][0][g], 0, 32);
        std::memset(pk->q[sb][1][g], 0, 32);
      }
      pk->sq[g] = pk->qm[g] = 0.0f;
      continue;
    }
    const float* q = qv[g];
    __m512 w[kD / 16];  // [16 channels] q * scale_c * softmax scale
    __m512 am = _mm512_setzero_ps(), qm = _mm512_setzero_ps();
    for (size_t c = 0; c < kD / 16; ++c) {
      const __m512 x = _mm512_mul_ps(_mm512_loadu_ps(q + 16 * c), vs);
      w[c] = _mm512_mul_ps(x, _mm512_load_ps(pr.scale + 16 * c));
      am = _mm512_max_ps(am, _mm512_and_ps(w[c], abs_mask));
      qm = _mm512_fmadd_ps(x, _mm512_load_ps(pr.min + 16 * c), qm);
    }
    const float amax = _mm512_reduce_max_ps(am);
    const __m512 inv = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
    for (size_t c = 0; c < kD / 16; ++c) {
      const __m512 x = kBits == 4 ? _mm512_permutexvar_ps(perm, w[c]) : w[c];
      const __m512 xs = _mm512_mul_ps(x, inv);
      const __m512i hi = _mm512_cvtps_epi32(xs);
      const __m512i lo = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_sub_ps(xs, _mm512_cvtepi32_ps(hi)), k256));
      _mm_store_si128(reinterpret_cast<__m128i*>(&pk->q[c / 2][0][g][16 * (c % 2)]), _mm512_cvtsepi32_epi8(hi));
      _mm_store_si128(reinterpret_cast<__m128i*>(&pk->q[c / 2][1][g][16 * (c % 2)]), _mm512_cvtsepi32_epi8(lo));
    }
    pk->sq[g] = amax / 127.0f / 256.0f;
    pk->qm[g] = _mm512_reduce_add_ps(qm);
  }
}

// vpmultishiftqb controls taking codes 0..3 (first 0) or 4..7 (first 4) of each dword's 8
// kBits-wide codes into its 4 bytes.
template <int kBits>
constexpr uint64_t ChanCtrl(int first) {
  uint64_t c = 0;
  for (int j = 0; j < 8; ++j) c |= static_cast<uint64_t>(32 * (j / 4) + kBits * (first + j % 4)) << (8 * j);
  return c;
}

// The 8 code vectors of sub-block sb (channels 32 sb ..) of rows r[0..15]: z[j] lane 4 l + i
// = row 4 i + l, bytes paired as ChanPairChannel says.
template <int kBits>
KV_INL void ChanCodes16(const uint8_t* const r[16], size_t sb, __m512i z[8]) {
  __m512i x[4], c[4];
  if constexpr (kBits == 4) {
    for (uint32_t i = 0; i < 4; ++i) x[i] = Load4(r + 4 * i, 16 * sb);
    Transpose4(x, c);
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    for (size_t k = 0; k < 4; ++k) {
      z[2 * k] = _mm512_and_si512(c[k], low4);
      z[2 * k + 1] = _mm512_and_si512(_mm512_srli_epi16(c[k], 4), low4);
    }
  } else {
    for (uint32_t i = 0; i < 4; ++i) x[i] = int8::RotCodes4<kBits>(r + 4 * i, 4 * kBits * sb);
    Transpose4(x, c);
    const __m512i mask = _mm512_set1_epi8((1 << kBits) - 1);
    const __m512i ca = _mm512_set1_epi64(static_cast<long long>(ChanCtrl<kBits>(0)));
    const __m512i cb = _mm512_set1_epi64(static_cast<long long>(ChanCtrl<kBits>(4)));
    for (size_t k = 0; k < 4; ++k) {
      z[2 * k] = _mm512_and_si512(int8::MultiShift(ca, c[k]), mask);
      z[2 * k + 1] = _mm512_and_si512(int8::MultiShift(cb, c[k]), mask);
    }
  }
}

// Scores of rows r[0..15] (16 K rows of one head and group; duplicates past the tile's end)
// against a pass's pack: s[4 t + g] for t < 16 (s: 64 floats, 64-byte aligned). With kDrip,
// `drip` steps once per sub-block and query vector (as ScoreStep16).
template <size_t kD, int kBits, bool kDrip>
KV_INL void ChanScoreStep16(const uint8_t* const r[16], const ChanPack<kD>& pk,
                            const int8::L1Ahead& ahead, int8::TileDrip* drip, float* s) {
  constexpr size_t kSb = kD / 32;
  __m512i hacc[4], lacc[4];
  for (size_t g = 0; g < 4; ++g) hacc[g] = lacc[g] = _mm512_setzero_si512();
  for (size_t sb = 0; sb < kSb; ++sb) {
    int8::PrefetchAhead(ahead, sb, kSb);
    __m512i z[8];
    ChanCodes16<kBits>(r, sb, z);
    if constexpr (kDrip) drip->Step(4);
#pragma GCC unroll 4
    for (size_t g = 0; g < 4; ++g) {
      for (size_t j = 0; j < 8; ++j) {
        hacc[g] = DpBusdBcast(hacc[g], z[j], &pk.q[sb][0][g][4 * j]);
        lacc[g] = DpBusdBcast(lacc[g], z[j], &pk.q[sb][1][g][4 * j]);
      }
    }
  }
  __m512i sc[4];
  for (size_t g = 0; g < 4; ++g) {
    const __m512i isum = _mm512_add_epi32(_mm512_slli_epi32(hacc[g], 8), lacc[g]);
    sc[g] = _mm512_castps_si512(
        _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(pk.sq[g]), _mm512_set1_ps(pk.qm[g])));
  }
  __m512i out[4];
  Transpose4(sc, out);
  for (uint32_t k = 0; k < 4; ++k) _mm512_store_si512(s + 16 * k, out[k]);
}

}  // namespace kvtier::attn::chan
#endif  // KVTIER_INT8_X86
