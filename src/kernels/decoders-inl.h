// Register decoders of the f32 fast and prefill paths (attention_fast.cc,
// attention_prefill.cc): per code layout (quant/format_traits.h), Chunk gives values
// [k N, (k + 1) N) of a row as f32 and Pair gives chunks k and k + 1 (k even) sharing what they
// can; DecoderOf<KvCode, scale dtype> maps the pair table's codes to them. Values equal the
// quant module's decoders (and so the reference) bit for bit.
// Per-target header (Highway's -inl.h convention): include at file scope of a foreach_target
// translation unit after hwy/highway.h. Pure functions; thread-safe.

#if defined(KVTIER_KERNELS_DECODERS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVTIER_KERNELS_DECODERS_INL_H_
#undef KVTIER_KERNELS_DECODERS_INL_H_
#else
#define KVTIER_KERNELS_DECODERS_INL_H_
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "hwy/highway.h"
#include "kvtier/format.h"
#include "quant/format_traits.h"
#include "quant/rot.h"
#include "simd/scalar-inl.h"

HWY_BEFORE_NAMESPACE();
namespace kvtier::attn::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// What a decoder needs to know of a row besides its bytes: quant's row layout.
using RowCtx = RowLayout;

HWY_INLINE float HalfAt(const uint8_t* p) { return kvtier::HWY_NAMESPACE::LoadScalar(DType::kF16, p, 0); }
HWY_INLINE float ScaleAt(DType t, const uint8_t* base, size_t i) {
  return kvtier::HWY_NAMESPACE::LoadScalar(t, base, i);
}
HWY_INLINE VF BroadcastHalf(DF, const uint8_t* p) { return kvtier::HWY_NAMESPACE::BroadcastHalf(p); }

template <DType kT>
HWY_INLINE VF BroadcastScale(DF df, const uint8_t* base, size_t i) {
  if constexpr (kT == DType::kF16) {
    return BroadcastHalf(df, base + 2 * i);
  } else {
    return hn::Set(df, ScaleAt(kT, base, i));
  }
}

// Decoders: Chunk gives values [k N, (k + 1) N) of a row as f32; Pair gives chunks k and k + 1
// (k even) sharing what they can (one load, one scale conversion).
template <class Dec>
struct PairOf {
  static HWY_INLINE void Pair(DF df, const uint8_t* row, size_t k, const RowCtx& c, VF& a, VF& b) {
    a = Dec::Chunk(df, row, k, c);
    b = Dec::Chunk(df, row, k + 1, c);
  }
};

struct DecF32 : PairOf<DecF32> {
  static HWY_INLINE VF Chunk(DF df, const uint8_t* row, size_t k, const RowCtx&) {
    return hn::LoadU(df, reinterpret_cast<const float*>(row) + k * hn::Lanes(df));
  }
};
struct DecF16 : PairOf<DecF16> {
  static HWY_INLINE VF Chunk(DF df, const uint8_t* row, size_t k, const RowCtx&) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(
        df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(row) + k * hn::Lanes(df)));
  }
};
struct DecBF16 : PairOf<DecBF16> {
  static HWY_INLINE VF Chunk(DF df, const uint8_t* row, size_t k, const RowCtx&) {
    const hn::Rebind<uint16_t, DF> du16;
    const hn::RebindToUnsigned<DF> du;
    const auto w = hn::PromoteTo(
        du, hn::LoadU(du16, reinterpret_cast<const uint16_t*>(row) + k * hn::Lanes(df)));
    return hn::BitCast(df, hn::ShiftLeft<16>(w));
  }
};
// bf16 for the decode fast path: Pair(k) gives the 2N values from k N as two vectors, the even
// values then the odd ones, from one load of N u32 (low halves shifted up, high halves
// masked): one integer op per N values and no shuffle. Its users pair it with queries in the
// same order and put the accumulators back in value order (kEvenOdd). The prefill kernel
// takes DecBF16 (Plain).
struct DecBF16EO {
  static constexpr bool kEvenOdd = true;
  using Plain = DecBF16;
  static HWY_INLINE void Pair(DF df, const uint8_t* row, size_t k, const RowCtx&, VF& a, VF& b) {
    const hn::RebindToUnsigned<DF> du;
    const auto w = hn::LoadU(du, reinterpret_cast<const uint32_t*>(row) + k * hn::Lanes(df) / 2);
    a = hn::BitCast(df, hn::ShiftLeft<16>(w));
    b = hn::BitCast(df, hn::And(w, hn::Set(du, 0xFFFF0000u)));
  }
};
// Decoders in value order by default.
template <class Dec, class = void>
struct EvenOdd {
  static constexpr bool value = false;
  using Plain = Dec;
};
template <class Dec>
struct EvenOdd<Dec, std::void_t<decltype(Dec::kEvenOdd)>> {
  static constexpr bool value = Dec::kEvenOdd;
  using Plain = typename Dec::Plain;
};

struct DecQ8_0 {  // ggml blocks: f16 scale, 32 int8 codes (Q8_0Traits)
  using T = Q8_0Traits;
  static HWY_INLINE VF Codes(DF df, const uint8_t* p) {
    const hn::Rebind<int8_t, DF> di8;
    return hn::ConvertTo(
        df, hn::PromoteTo(hn::RebindToSigned<DF>(), hn::LoadU(di8, reinterpret_cast<const int8_t*>(p))));
  }
  static HWY_INLINE VF Chunk(DF df, const uint8_t* row, size_t k, const RowCtx&) {
    const size_t v0 = k * hn::Lanes(df);
    const uint8_t* block = row + (v0 / T::kBlockValues) * T::kBlockBytes;
    return hn::Mul(Codes(df, block + T::kCodesOffset + v0 % T::kBlockValues),
                   BroadcastHalf(df, block + T::kScaleOffset));
  }
  static HWY_INLINE void Pair(DF df, const uint8_t* row, size_t k, const RowCtx&, VF& a, VF& b) {
    const size_t N = hn::Lanes(df);
    const size_t v0 = k * N;
    const uint8_t* block = row + (v0 / T::kBlockValues) * T::kBlockBytes;
    const VF d = BroadcastHalf(df, block + T::kScaleOffset);  // chunks k, k + 1 share the block (N <= 16)
    const uint8_t* codes = block + T::kCodesOffset + v0 % T::kBlockValues;
    a = hn::Mul(Codes(df, codes), d);
    b = hn::Mul(Codes(df, codes + N), d);
  }
};
struct DecQ4_0 {  // ggml blocks: f16 scale; codes in split halves (Q4_0Traits)
  using T = Q4_0Traits;
  static_assert(T::kNibbles == NibbleOrder::kSplitHalves, "low nibbles: first half");
  static HWY_INLINE VF Chunk(DF df, const uint8_t* row, size_t k, const RowCtx&) {
    const size_t v0 = k * hn::Lanes(df);
    const uint8_t* block = row + (v0 / T::kBlockValues) * T::kBlockBytes;
    const size_t o = v0 % T::kBlockValues;
    const hn::Rebind<uint8_t, DF> du8;
    const auto bytes = hn::LoadU(du8, block + T::kCodesOffset + o % T::kCodeBytes);
    const auto nib = o < T::kCodeBytes ? hn::And(bytes, hn::Set(du8, 0x0f)) : hn::ShiftRight<4>(bytes);
    const hn::RebindToSigned<DF> di;
    const auto c = hn::Sub(hn::PromoteTo(di, nib), hn::Set(di, T::kZeroPoint));
    return hn::Mul(hn::ConvertTo(df, c), BroadcastHalf(df, block + T::kScaleOffset));
  }
  static HWY_INLINE void Pair(DF df, const uint8_t* row, size_t k, const RowCtx& ctx, VF& a,
                              VF& b) {
    const size_t N = hn::Lanes(df);
    if (N != 16) {
      a = Chunk(df, row, k, ctx);
      b = Chunk(df, row, k + 1, ctx);
      return;
    }
    // N = 16: chunks k, k + 1 are the low and high nibbles of one block's 16 bytes.
    const uint8_t* block = row + (k / 2) * T::kBlockBytes;
    const hn::Rebind<uint8_t, DF> du8;
    const hn::RebindToSigned<DF> di;
    const auto w = hn::PromoteTo(di, hn::LoadU(du8, block + T::kCodesOffset));  // one byte per lane
    const VF d = BroadcastHalf(df, block + T::kScaleOffset);
#if HWY_TARGET <= HWY_AVX3
    // 16-entry table of (c - 8) * d, the reference's values; vpermps reads only the low 4
    // bits of each index, so the low nibbles need no mask.
    const __m512 table = _mm512_mul_ps(_mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4,
                                                      5, 6, 7),
                                       d.raw);
    a = VF{_mm512_permutexvar_ps(w.raw, table)};
    b = VF{_mm512_permutexvar_ps(_mm512_srli_epi32(w.raw, 4), table)};
#else
    const auto eight = hn::Set(di, T::kZeroPoint);
    a = hn::Mul(hn::ConvertTo(df, hn::Sub(hn::And(w, hn::Set(di, 0x0f)), eight)), d);
    b = hn::Mul(hn::ConvertTo(df, hn::Sub(hn::ShiftRight<4>(w), eight)), d);
#endif
  }
};
template <int kBits, DType kScale>
struct DecAffine {  // codes (little-endian bit stream) | scales | biases
  static HWY_INLINE VF Codes(DF df, const uint8_t* row, size_t v0) {
    const hn::Rebind<uint8_t, DF> du8;
    hn::Vec<decltype(du8)> codes;
    if constexpr (kBits == 8) {
      codes = hn::LoadU(du8, row + v0);
    } else {
      static_assert(kBits == 4, "fast affine decoders: 8 and 4 bits");
      // N/2 bytes -> N nibbles, low nibble first.
      const hn::Repartition<uint16_t, decltype(du8)> dw;  // N/2 lanes
      const hn::Rebind<uint8_t, decltype(dw)> du8h;
      const auto w = hn::PromoteTo(dw, hn::LoadU(du8h, row + v0 / 2));
      codes = hn::BitCast(du8, hn::Or(hn::And(w, hn::Set(dw, 0x000f)),
                                      hn::ShiftLeft<4>(hn::And(w, hn::Set(dw, 0x00f0)))));
    }
    return hn::ConvertTo(df, hn::PromoteTo(hn::RebindToSigned<DF>(), codes));
  }
  static HWY_INLINE VF Chunk(DF df, const uint8_t* row, size_t k, const RowCtx& c) {
    const size_t v0 = k * hn::Lanes(df);
    const size_t g = v0 >> c.group_shift;
    return hn::MulAdd(Codes(df, row, v0), BroadcastScale<kScale>(df, row + c.scales_off, g),
                      BroadcastScale<kScale>(df, row + c.biases_off, g));
  }
  static HWY_INLINE void Pair(DF df, const uint8_t* row, size_t k, const RowCtx& c, VF& a, VF& b) {
    const size_t N = hn::Lanes(df);
    const size_t v0 = k * N;
    if (2 * N > c.group) {
      a = Chunk(df, row, k, c);
      b = Chunk(df, row, k + 1, c);
      return;
    }
    const size_t g = v0 >> c.group_shift;  // both chunks lie in group g (groups >= 2N values)
    const VF sc = BroadcastScale<kScale>(df, row + c.scales_off, g);
    const VF bi = BroadcastScale<kScale>(df, row + c.biases_off, g);
#if HWY_TARGET <= HWY_AVX3
    if constexpr (kBits == 4) {
      // 16-entry table fma(c, scale, bias) (the reference's values); each chunk's 8 bytes are
      // duplicated per nibble and shifted so lane 2j reads byte j, lane 2j + 1 byte j >> 4
      // (vpermps looks at the low 4 bits only).
      const __m512 table = _mm512_fmadd_ps(
          _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), sc.raw, bi.raw);
      const __m128i dup_bytes = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
      const __m512i odd_by_4 = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
      auto chunk = [&](const uint8_t* p) {
        const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
        const __m512i idx =
            _mm512_srlv_epi32(_mm512_cvtepu8_epi32(_mm_shuffle_epi8(bytes, dup_bytes)), odd_by_4);
        return VF{_mm512_permutexvar_ps(idx, table)};
      };
      a = chunk(row + v0 / 2);
      b = chunk(row + v0 / 2 + N / 2);
      return;
    }
#endif
    a = hn::MulAdd(Codes(df, row, v0), sc, bi);
    b = hn::MulAdd(Codes(df, row, v0 + N), sc, bi);
  }
};

// rot4 blocks (quant/rot.h): f16 scale, then 32 codebook indices, value 2j in the low nibble of
// code byte j. Values are levels[code] * d in the rotated basis (the driver rotates the
// queries and the outputs), as quant's DequantizeRowsStridedStored gives them.
struct DecRot4 {
  static constexpr size_t kBlockBytes = RotBlockBytes(4);
  static HWY_INLINE VF Chunk(DF df, const uint8_t* row, size_t k, const RowCtx&) {
    const size_t N = hn::Lanes(df);
    const size_t v0 = k * N;
    const uint8_t* block = row + (v0 / kRotBlockValues) * kBlockBytes;
    const size_t o = v0 % kRotBlockValues;
    HWY_ALIGN float y[HWY_LANES(float)];
    for (size_t i = 0; i < N; ++i) {
      const uint8_t b = block[2 + (o + i) / 2];
      y[i] = kRotLevels4[((o + i) & 1) ? b >> 4 : b & 0x0f];
    }
    return hn::Mul(hn::Load(df, y), BroadcastHalf(df, block));
  }
  static HWY_INLINE void Pair(DF df, const uint8_t* row, size_t k, const RowCtx& ctx, VF& a, VF& b) {
#if HWY_TARGET <= HWY_AVX3
    if constexpr (HWY_LANES(float) == 16) {
      // N = 16: chunks k, k + 1 are one block. 16-entry table levels * d; each chunk's 8 bytes
      // duplicated per nibble and shifted so lane 2j reads byte j, lane 2j + 1 byte j >> 4
      // (vpermps looks at the low 4 bits only).
      const uint8_t* block = row + (k / 2) * kBlockBytes;
      const __m512 table = _mm512_mul_ps(_mm512_loadu_ps(kRotLevels4), BroadcastHalf(df, block).raw);
      const __m128i dup_bytes = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
      const __m512i odd_by_4 = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
      auto chunk = [&](const uint8_t* p) {
        const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
        const __m512i idx =
            _mm512_srlv_epi32(_mm512_cvtepu8_epi32(_mm_shuffle_epi8(bytes, dup_bytes)), odd_by_4);
        return VF{_mm512_permutexvar_ps(idx, table)};
      };
      a = chunk(block + 2);
      b = chunk(block + 2 + 8);
      return;
    }
#endif
#if HWY_TARGET == HWY_AVX2
    if constexpr (HWY_LANES(float) == 8) {
      // N = 8: two 8-entry tables (levels 0-7, 8-15) times d, vpermps on the low 3 bits and a
      // blend on bit 3; lane j of a chunk reads nibble j of its 4 bytes.
      const size_t v0 = k * 8;
      const uint8_t* block = row + (v0 / kRotBlockValues) * kBlockBytes;
      const __m256 d = BroadcastHalf(df, block).raw;
      const __m256 lo = _mm256_mul_ps(_mm256_loadu_ps(kRotLevels4), d);
      const __m256 hi = _mm256_mul_ps(_mm256_loadu_ps(kRotLevels4 + 8), d);
      const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
      auto chunk = [&](const uint8_t* p) {
        uint32_t w;
        std::memcpy(&w, p, 4);
        const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(w)), shifts),
                                             _mm256_set1_epi32(15));
        const __m256 l = _mm256_permutevar8x32_ps(lo, idx);
        const __m256 h = _mm256_permutevar8x32_ps(hi, idx);
        // Bit 3 of idx moved to the sign bit selects the high table.
        return VF{_mm256_blendv_ps(l, h, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)))};
      };
      const size_t o = v0 % kRotBlockValues;  // 0 or 16: chunks k, k + 1 share the block
      a = chunk(block + 2 + o / 2);
      b = chunk(block + 2 + o / 2 + 4);
      return;
    }
#endif
    a = Chunk(df, row, k, ctx);
    b = Chunk(df, row, k + 1, ctx);
  }
};

// rot3 / rot2 blocks (quant/rot.h): f16 scale, then 32 codes of kBits bits as a little-endian
// bit stream. A chunk of N values (N = 8 or 16, 32 / N chunks per block) is the N codes at
// bits [o * kBits, (o + N) * kBits) of the stream, o = the chunk's offset in its block: each
// lane shifts its copy of the chunk's bits right by kBits * lane and masks, and vpermps looks
// the code up in a register of levels * d (8 or 4 entries, the low 3 index bits).
template <int kBits>
struct DecRotN {
  static_assert(kBits == 3 || kBits == 2, "rot3 / rot2");
  static constexpr size_t kBlockBytes = RotBlockBytes(kBits);
  static constexpr uint32_t kMask = (1u << kBits) - 1;
  // The levels, padded to 16 entries for the vpermps tables.
  struct Padded {
    float v[16];
  };
  static constexpr Padded MakePadded() {
    Padded p{};
    for (int i = 0; i < (1 << kBits); ++i) p.v[i] = RotLevels<kBits>()[i];
    return p;
  }
  static constexpr Padded kLevels = MakePadded();
  // The stream bits of values [o, o + n) of a block (n <= 16) in the low bits of one word: the
  // bytes copied are within the block's codes, never past them.
  // Loads of 4, 2 and 1 bytes put together in registers: a memcpy of 3 or 6 bytes into a
  // zeroed word went through the stack and stalled on store forwarding (rot3 ran 5x slower).
  static HWY_INLINE uint64_t Bits(const uint8_t* block, size_t o, size_t n) {
    const size_t first = o * kBits / 8, last = ((o + n) * kBits + 7) / 8;
    const uint8_t* p = block + 2 + first;
    const size_t bytes = last - first;
    uint64_t w = 0;
    size_t i = 0;
    for (; i + 4 <= bytes; i += 4) {
      uint32_t x;
      std::memcpy(&x, p + i, 4);
      w |= uint64_t{x} << (8 * i);
    }
    if (i + 2 <= bytes) {
      uint16_t x;
      std::memcpy(&x, p + i, 2);
      w |= uint64_t{x} << (8 * i);
      i += 2;
    }
    if (i < bytes) w |= uint64_t{p[i]} << (8 * i);
    return w >> (o * kBits % 8);
  }
  static HWY_INLINE VF Chunk(DF df, const uint8_t* row, size_t k, const RowCtx&) {
    const size_t N = hn::Lanes(df);
    const size_t v0 = k * N;
    const uint8_t* block = row + (v0 / kRotBlockValues) * kBlockBytes;
    const uint64_t w = Bits(block, v0 % kRotBlockValues, N);
    const float* L = RotLevels<kBits>();
    HWY_ALIGN float y[HWY_LANES(float)];
    for (size_t i = 0; i < N; ++i) y[i] = L[(w >> (kBits * i)) & kMask];
    return hn::Mul(hn::Load(df, y), BroadcastHalf(df, block));
  }
  static HWY_INLINE void Pair(DF df, const uint8_t* row, size_t k, const RowCtx& ctx, VF& a, VF& b) {
#if HWY_TARGET <= HWY_AVX3
    if constexpr (HWY_LANES(float) == 16) {
      // Chunks k, k + 1 are one block; lanes 0-7 take bits [0, 8 kBits) of the chunk, lanes
      // 8-15 the next 8 kBits bits.
      const uint8_t* block = row + (k / 2) * kBlockBytes;
      const __m512 table = _mm512_mul_ps(_mm512_loadu_ps(kLevels.v), BroadcastHalf(df, block).raw);
      const __m512i shifts = _mm512_setr_epi32(0, kBits, 2 * kBits, 3 * kBits, 4 * kBits, 5 * kBits,
                                               6 * kBits, 7 * kBits, 0, kBits, 2 * kBits, 3 * kBits,
                                               4 * kBits, 5 * kBits, 6 * kBits, 7 * kBits);
      const __m512i mask = _mm512_set1_epi32(static_cast<int>(kMask));
      auto chunk = [&](size_t o) {
        const uint64_t w = Bits(block, o, 16);
        const __m512i words = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_set1_epi32(static_cast<int>(w))),
            _mm256_set1_epi32(static_cast<int>(w >> (8 * kBits))), 1);
        const __m512i idx = _mm512_and_si512(_mm512_srlv_epi32(words, shifts), mask);
        return VF{_mm512_permutexvar_ps(idx, table)};
      };
      a = chunk(0);
      b = chunk(16);
      return;
    }
#endif
#if HWY_TARGET == HWY_AVX2
    if constexpr (HWY_LANES(float) == 8) {
      const size_t v0 = k * 8;
      const uint8_t* block = row + (v0 / kRotBlockValues) * kBlockBytes;
      const __m256 table = _mm256_mul_ps(_mm256_loadu_ps(kLevels.v), BroadcastHalf(df, block).raw);
      const __m256i shifts = _mm256_setr_epi32(0, kBits, 2 * kBits, 3 * kBits, 4 * kBits, 5 * kBits,
                                               6 * kBits, 7 * kBits);
      const __m256i mask = _mm256_set1_epi32(static_cast<int>(kMask));
      auto chunk = [&](size_t o) {
        const uint64_t w = Bits(block, o, 8);
        const __m256i idx = _mm256_and_si256(
            _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(w)), shifts), mask);
        return VF{_mm256_permutevar8x32_ps(table, idx)};
      };
      const size_t o = v0 % kRotBlockValues;  // 0 or 16: chunks k, k + 1 share the block
      a = chunk(o);
      b = chunk(o + 8);
      return;
    }
#endif
    a = Chunk(df, row, k, ctx);
    b = Chunk(df, row, k + 1, ctx);
  }
};

// The decoder of a code layout (affine: with its scale dtype). bf16 decodes in even / odd
// order (EvenOdd<>::Plain is its value-order twin).
template <KvCode C, DType kScale>
struct DecoderOfT;
template <DType S> struct DecoderOfT<KvCode::kF32, S> { using type = DecF32; };
template <DType S> struct DecoderOfT<KvCode::kF16, S> { using type = DecF16; };
template <DType S> struct DecoderOfT<KvCode::kBF16, S> { using type = DecBF16EO; };
template <DType S> struct DecoderOfT<KvCode::kQ8_0, S> { using type = DecQ8_0; };
template <DType S> struct DecoderOfT<KvCode::kQ4_0, S> { using type = DecQ4_0; };
template <DType S> struct DecoderOfT<KvCode::kAffine8, S> { using type = DecAffine<8, S>; };
template <DType S> struct DecoderOfT<KvCode::kAffine4, S> { using type = DecAffine<4, S>; };
template <DType S> struct DecoderOfT<KvCode::kRot4, S> { using type = DecRot4; };
template <DType S> struct DecoderOfT<KvCode::kRot3, S> { using type = DecRotN<3>; };
template <DType S> struct DecoderOfT<KvCode::kRot2, S> { using type = DecRotN<2>; };
template <KvCode C, DType kScale = DType::kF16>
using DecoderOf = typename DecoderOfT<C, kScale>::type;

// Calls f.template operator()<KDec, VDec>() with the decoders of K and V (affine: the choice's
// scale dtype, the same for K and V).
template <KvCode K, KvCode V, class F>
HWY_INLINE void WithDecoders(DType scale_dtype, F&& f) {
  if constexpr (IsAffine(K)) {
    switch (scale_dtype) {
      case DType::kF16: f.template operator()<DecoderOf<K, DType::kF16>, DecoderOf<V, DType::kF16>>(); break;
      case DType::kBF16: f.template operator()<DecoderOf<K, DType::kBF16>, DecoderOf<V, DType::kBF16>>(); break;
      case DType::kF32: f.template operator()<DecoderOf<K, DType::kF32>, DecoderOf<V, DType::kF32>>(); break;
    }
  } else {
    f.template operator()<DecoderOf<K>, DecoderOf<V>>();
  }
}

}  // namespace kvtier::attn::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // KVTIER_KERNELS_DECODERS_INL_H_
