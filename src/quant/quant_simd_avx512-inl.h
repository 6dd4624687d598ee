// AVX-512 quantizers for affine, q4_0 and q8_0: 16 groups (or blocks) per batch, so the
// reduce -> divide -> broadcast chain of one batch is paid once per 16 groups, and codes
// narrowed to bytes with saturating packs (which are also the clamp) instead of a min / max
// and a vpmov per vector. Same operations on every value as quant_ref.cc, so the same bytes.
// From an f16 source the min / max run on the raw 16-bit patterns (MinMax16Half), so each
// value is converted to f32 once, for its code; the parameters of the next batch are computed
// before the codes of the current one (software pipelining); and when a batch covers whole
// rows with f16 scales, each row's scales and biases go out with one store each.
//
// Not a standalone header: quant_simd.cc includes it inside its per-target namespace, in the
// AVX3 targets only, after LoadF / StoreF / RoundToInt / TruncToInt / AffineParamsVec /
// FirstOfMagnitude. Pure functions.

namespace avx512 {

// The per-batch parameter lambdas are inlined into their loops: as calls, each batch paid a
// vzeroupper, spills and reloads of the loop's vector constants.
#ifndef KVTIER_QUANT_INLINE_LAMBDA
#define KVTIER_QUANT_INLINE_LAMBDA __attribute__((always_inline))
#endif

constexpr size_t kWide = 16;  // groups or blocks per batch: one result per float lane

// A transposed reduction of 16 vectors a[0..15] to one whose lane j = op over the lanes of
// a[j] (SumBatch's, simd_reduce-inl.h, for any associative, commutative op), in two steps so
// that only four inputs need be live at once: Quarter(a[m], a[m+4], a[m+8], a[m+12]) -> q[m],
// then Finish(q).
template <class Op>
HWY_INLINE __m512 Quarter(__m512 a0, __m512 a4, __m512 a8, __m512 a12, Op op) {
  // 512 -> 256: lanes 0..7 hold a partial of x, 8..15 of y.
  auto halve = [&](__m512 x, __m512 y) {
    return op(_mm512_shuffle_f32x4(x, y, 0x44), _mm512_shuffle_f32x4(x, y, 0xEE));
  };
  // 256 -> 128: 128-bit block k holds a partial of input m + 4k.
  const __m512 xy = halve(a0, a4), zw = halve(a8, a12);
  return op(_mm512_shuffle_f32x4(xy, zw, 0x88), _mm512_shuffle_f32x4(xy, zw, 0xDD));
}
template <class Op>
HWY_INLINE __m512 Finish(const __m512* q, Op op) {
  const __m512 u0 = op(_mm512_unpacklo_ps(q[0], q[1]), _mm512_unpackhi_ps(q[0], q[1]));
  const __m512 u1 = op(_mm512_unpacklo_ps(q[2], q[3]), _mm512_unpackhi_ps(q[2], q[3]));
  return op(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(u0), _mm512_castps_pd(u1))),
            _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(u0), _mm512_castps_pd(u1))));
}

HWY_INLINE __m512 MaxPs(__m512 a, __m512 b) { return _mm512_max_ps(a, b); }
HWY_INLINE __m512 MinPs(__m512 a, __m512 b) { return _mm512_min_ps(a, b); }

// Lane b of lo / hi = min / max of the kLen values of group b (b < 16) starting at element
// `first` of src; NaN ignored, as the reference's std::min / std::max scans (the running
// value is the second operand, which maxps / minps return when the first is NaN).
template <DType kSrc, size_t kLen>
HWY_INLINE void MinMax16(const void* src, size_t first, __m512& lo, __m512& hi) {
  const DF df;
  __m512 qmax[4], qmin[4];
  for (size_t m = 0; m < 4; ++m) {
    __m512 vmax[4], vmin[4];
    for (size_t k = 0; k < 4; ++k) {
      const size_t b = m + 4 * k;
      __m512 mx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
      __m512 mn = _mm512_set1_ps(std::numeric_limits<float>::infinity());
      for (size_t j = 0; j < kLen; j += 16) {
        const __m512 v = LoadF<kSrc>(df, src, first + b * kLen + j).raw;
        mx = _mm512_max_ps(v, mx);
        mn = _mm512_min_ps(v, mn);
      }
      vmax[k] = mx;
      vmin[k] = mn;
    }
    qmax[m] = Quarter(vmax[0], vmax[1], vmax[2], vmax[3], MaxPs);
    qmin[m] = Quarter(vmin[0], vmin[1], vmin[2], vmin[3], MinPs);
  }
  hi = Finish(qmax, MaxPs);
  lo = Finish(qmin, MinPs);
}

HWY_INLINE __m512 SMax16(__m512 a, __m512 b) {
  return _mm512_castsi512_ps(_mm512_max_epi16(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}
HWY_INLINE __m512 UMax16(__m512 a, __m512 b) {
  return _mm512_castsi512_ps(_mm512_max_epu16(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}

// MinMax16 for an f16 source without converting it: on the raw bits, the signed 16-bit max of
// a group is its float max when the group holds a value >= +0 (negative halves are negative
// int16), and the unsigned max is its float min when it holds a value <= -0 (the largest
// magnitude with the sign bit set). So two integer max per 32 values, and the f32 conversion
// only of the 32 results. Returns false (lo, hi unset) when some group of the 16 has values of
// one sign only or a NaN; the caller then takes MinMax16. The sign of a zero min or max may
// differ from the reference's scan; no parameter depends on it (AffineParamsFromMinMax and
// q4_0's d see zeros only through fabs, == 0 and differences with a nonzero value).
template <size_t kLen>
HWY_INLINE bool MinMax16Half(const void* src, size_t first, __m512& lo, __m512& hi) {
  static_assert(kLen % 32 == 0, "a group is whole vectors of halves");
  const uint16_t* p = static_cast<const uint16_t*>(src) + first;
  __m512 qs[4], qu[4];
  for (size_t m = 0; m < 4; ++m) {
    __m512 vs[4], vu[4];
    for (size_t k = 0; k < 4; ++k) {
      const uint16_t* g = p + (m + 4 * k) * kLen;
      __m512i s = _mm512_loadu_si512(g), u = s;
      for (size_t j = 32; j < kLen; j += 32) {
        const __m512i v = _mm512_loadu_si512(g + j);
        s = _mm512_max_epi16(s, v);
        u = _mm512_max_epu16(u, v);
      }
      vs[k] = _mm512_castsi512_ps(s);
      vu[k] = _mm512_castsi512_ps(u);
    }
    // For one-vector groups vs == vu: the first shuffles of the two are the same (CSE).
    qs[m] = Quarter(vs[0], vs[1], vs[2], vs[3], SMax16);
    qu[m] = Quarter(vu[0], vu[1], vu[2], vu[3], UMax16);
  }
  // Dword j holds two partial maxima of group j; fold the high word onto the low one.
  __m512i s = _mm512_castps_si512(Finish(qs, SMax16));
  __m512i u = _mm512_castps_si512(Finish(qu, UMax16));
  const __m512i low = _mm512_set1_epi32(0xFFFF);
  s = _mm512_and_si512(_mm512_max_epi16(s, _mm512_srli_epi32(s, 16)), low);
  u = _mm512_and_si512(_mm512_max_epu16(u, _mm512_srli_epi32(u, 16)), low);
  // s in [+0, +Inf] and u in [-0, -Inf] (as bits): both signs present, no NaN.
  const __m512i inf = _mm512_set1_epi32(0x7C00);
  const __mmask16 ok =
      _mm512_cmple_epu32_mask(s, inf) &
      _mm512_cmple_epu32_mask(_mm512_sub_epi32(u, _mm512_set1_epi32(0x8000)), inf);
  if (ok != 0xFFFF) return false;
  hi = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(s));
  lo = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(u));
  return true;
}

// MinMax16 by the fastest exact way for the source dtype.
template <DType kSrc, size_t kLen>
HWY_INLINE void MinMax16Any(const void* src, size_t first, __m512& lo, __m512& hi) {
  if constexpr (kSrc == DType::kF16) {
    if (HWY_LIKELY(MinMax16Half<kLen>(src, first, lo, hi))) return;
  }
  MinMax16<kSrc, kLen>(src, first, lo, hi);
}

// Bytes of 4 int32 vectors (64 values) in order, each saturated to [0, 255] (NaN's
// INT32_MIN -> 0): two packs interleave 128-bit blocks, one dword permute undoes it.
HWY_INLINE __m512i PackU8x64(__m512i q0, __m512i q1, __m512i q2, __m512i q3) {
  const __m512i bytes =
      _mm512_packus_epi16(_mm512_packs_epi32(q0, q1), _mm512_packs_epi32(q2, q3));
  // Block k holds dwords q0[4k..], q1[4k..], q2[4k..], q3[4k..]: transpose 4 x 4 dwords.
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_epi32(idx, bytes);
}

// 32 bytes from 64 codes < 16 (byte i = code i): value 2k in the low nibble of byte k.
HWY_INLINE __m256i PackNibbles64(__m512i codes) {
  const __m512i w = _mm512_maddubs_epi16(codes, _mm512_set1_epi16(0x1001));  // c0 + 16 * c1
  return _mm512_cvtepi16_epi8(w);
}

// Stores one scale or bias of each of 16 groups (lane b -> element gi_b of its row) in the
// scale dtype, converted all at once. The lanes are read back through memory by scalar loads
// (volatile: compilers otherwise extract each lane with a shuffle-port vpextrw).
struct GroupSlots {
  uint8_t* row[kWide];
  size_t gi[kWide];
};

HWY_INLINE void StoreScalars16(DType t, __m512 v, const GroupSlots& s, size_t off) {
  if (t == DType::kF16) {
    HWY_ALIGN uint16_t h[kWide];
    _mm256_store_si256(reinterpret_cast<__m256i*>(h),
                       _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const volatile uint16_t* hv = h;
    for (size_t b = 0; b < kWide; ++b) {
      const uint16_t x = hv[b];
      std::memcpy(s.row[b] + off + 2 * s.gi[b], &x, 2);
    }
  } else if (t == DType::kBF16) {
    HWY_ALIGN uint16_t h[kWide];
    StoreF<DType::kBF16>(DF(), VF{v}, h, 0);
    for (size_t b = 0; b < kWide; ++b) std::memcpy(s.row[b] + off + 2 * s.gi[b], &h[b], 2);
  } else {
    HWY_ALIGN float f[kWide];
    _mm512_store_ps(f, v);
    for (size_t b = 0; b < kWide; ++b) std::memcpy(s.row[b] + off + 4 * s.gi[b], &f[b], 4);
  }
}

// Copies kBytes from the stack buffer `from` (just written by a vector store) by volatile
// scalar loads: without them compilers extract the lanes with shuffle-port instructions.
template <size_t kBytes>
HWY_INLINE void CopyFromStack(uint8_t* to, const uint16_t* from) {
  if constexpr (kBytes <= 8) {
    using T = std::conditional_t<kBytes == 2, uint16_t, std::conditional_t<kBytes == 4, uint32_t, uint64_t>>;
    const T x = *reinterpret_cast<const volatile T*>(from);
    std::memcpy(to, &x, kBytes);
  } else {
    for (size_t i = 0; i < kBytes; i += 8) CopyFromStack<8>(to + i, from + i / 2);
  }
}

// f16 scales and biases of 16 groups that fill 16 / kPerRow whole rows from row0 (kPerRow
// groups a row): each row's scales, then its biases, are consecutive halves, so one store each.
template <size_t kPerRow>
HWY_INLINE void StoreRowScalesF16(__m512 scale, __m512 bias, uint8_t* row0, size_t row_bytes,
                                  const AffineRowLayout& l) {
  HWY_ALIGN uint16_t h[2 * kWide];
  _mm256_store_si256(reinterpret_cast<__m256i*>(h),
                     _mm512_cvtps_ph(scale, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  _mm256_store_si256(reinterpret_cast<__m256i*>(h + kWide),
                     _mm512_cvtps_ph(bias, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (size_t r = 0; r < kWide / kPerRow; ++r) {
    uint8_t* row = row0 + r * row_bytes;
    CopyFromStack<2 * kPerRow>(row + l.scales_off, h + r * kPerRow);
    CopyFromStack<2 * kPerRow>(row + l.biases_off, h + kWide + r * kPerRow);
  }
}

// 32 bytes of nibbles from 4 int32 vectors q0..q3 (64 codes in order): code 2k in the low
// nibble of byte k, each code saturated to [0, 15] (NaN's INT32_MIN -> 0). The packs leave
// 128-bit block k holding q0[4k..4k+3], q1[4k..], q2[4k..], q3[4k..]; vpmaddubsw joins pairs,
// a pack narrows the words to bytes within each block, and one word permute puts the
// 16-bit units (4 codes each) in order, instead of a dword permute plus a 2-uop vpmovwb.
HWY_INLINE __m256i PackNibbles4x16(__m512i q0, __m512i q1, __m512i q2, __m512i q3) {
  __m512i c = _mm512_packus_epi16(_mm512_packs_epi32(q0, q1), _mm512_packs_epi32(q2, q3));
  c = _mm512_min_epu8(c, _mm512_set1_epi8(15));
  const __m512i w = _mm512_maddubs_epi16(c, _mm512_set1_epi16(0x1001));  // c0 + 16 * c1
  const __m512i b = _mm512_packus_epi16(w, w);  // block k: units q0, q1, q2, q3 (twice)
  // Output unit u = 4m + k (codes 16m + 4k ..) is unit m of block k: word 8k + m.
  const __m512i idx = _mm512_set_epi16(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  //
                                       27, 19, 11, 3, 26, 18, 10, 2, 25, 17, 9, 1, 24, 16, 8, 0);
  return _mm512_castsi512_si256(_mm512_permutexvar_epi16(idx, b));
}

// Affine groups [g_begin, g_end) (g_end - g_begin a multiple of 16) of rows laid out as l.
// Software-pipelined: the parameters of batch n + 1 (min / max, reduction, divides) are
// computed before the codes of batch n, so their long dependency chain overlaps the codes'
// throughput-bound work instead of stalling in front of them.
template <int kBits, DType kSrc, size_t kGroup>
void QuantizeAffine16(const Format& f, const AffineRowLayout& l, size_t row_bytes,
                      const void* src, size_t g_begin, size_t g_end, uint8_t* dst) {
  static_assert(kGroup % 32 == 0, "a group is whole pairs of vectors");
  constexpr size_t kChunk = kGroup >= 64 ? 64 : 32;  // values narrowed together
  const DF df;
  struct Batch {
    HWY_ALIGN float bias[kWide];
    HWY_ALIGN float inv[kWide];
    uint8_t* gout[kWide];  // where the codes of each group go (unless whole_rows)
    uint8_t* row0;         // the first row (whole_rows)
  };
  Batch batch[2];
  HWY_ALIGN uint8_t codes[kGroup];  // codes, for widths packed by scalar code
  size_t row = g_begin / l.n_groups, gi = g_begin % l.n_groups;
  // Every batch covers whole rows (a power of two groups a row, from a row's start) and the
  // scales are f16: the scales and biases of a row are stored together (the common case).
  const size_t per_row = l.n_groups;
  const bool whole_rows = f.scale_dtype == DType::kF16 && kWide % per_row == 0 && gi == 0;
  // Then group k of a batch has its codes at row0 + row_off[k] (per_row a power of two).
  size_t row_off[kWide];
  if (whole_rows) {
    const size_t row_shift = hwy::Num0BitsBelowLS1Bit_Nonzero64(per_row);
    for (size_t k = 0; k < kWide; ++k) {
      row_off[k] = (k >> row_shift) * row_bytes + (k & (per_row - 1)) * l.group_code_bytes;
    }
  }
  // Parameters of the 16 groups from g0: scales and biases stored, bias / inv_scale kept.
  auto params = [&](size_t g0, Batch& p) KVTIER_QUANT_INLINE_LAMBDA {
    __m512 lo, hi;
    MinMax16Any<kSrc, kGroup>(src, g0 * kGroup, lo, hi);
    VF s, b;
    AffineParamsVec<kBits>(df, VF{lo}, VF{hi}, s, b);
    _mm512_store_ps(p.bias, b.raw);
    _mm512_store_ps(p.inv, _mm512_div_ps(_mm512_set1_ps(1.0f), s.raw));
    if (whole_rows) {
      uint8_t* row0 = dst + row * row_bytes;
      p.row0 = row0;
      row += kWide / per_row;
      switch (per_row) {
        case 1: StoreRowScalesF16<1>(s.raw, b.raw, row0, row_bytes, l); break;
        case 2: StoreRowScalesF16<2>(s.raw, b.raw, row0, row_bytes, l); break;
        case 4: StoreRowScalesF16<4>(s.raw, b.raw, row0, row_bytes, l); break;
        case 8: StoreRowScalesF16<8>(s.raw, b.raw, row0, row_bytes, l); break;
        default: StoreRowScalesF16<16>(s.raw, b.raw, row0, row_bytes, l); break;
      }
      return;
    }
    GroupSlots slots;
    for (size_t k = 0; k < kWide; ++k) {
      slots.row[k] = dst + row * row_bytes;
      slots.gi[k] = gi;
      p.gout[k] = slots.row[k] + gi * l.group_code_bytes;
      if (++gi == l.n_groups) {
        gi = 0;
        ++row;
      }
    }
    StoreScalars16(f.scale_dtype, s.raw, slots, l.scales_off);
    StoreScalars16(f.scale_dtype, b.raw, slots, l.biases_off);
  };
  if (g_begin < g_end) params(g_begin, batch[0]);
  for (size_t g0 = g_begin, n = 0; g0 < g_end; g0 += kWide, ++n) {
    if (g0 + kWide < g_end) params(g0 + kWide, batch[(n + 1) & 1]);
    const Batch& p = batch[n & 1];
    for (size_t k = 0; k < kWide; ++k) {
      uint8_t* gout = whole_rows ? p.row0 + row_off[k] : p.gout[k];
      const __m512 vb = _mm512_set1_ps(p.bias[k]);
      const __m512 vinv = _mm512_set1_ps(p.inv[k]);
      const size_t first = (g0 + k) * kGroup;
      // Codes: rint((x - bias) * inv_scale) saturated to [0, 255] by the packs (NaN ->
      // INT32_MIN -> 0), then to n_bins: the reference's clamp.
      auto code = [&](size_t j) {
        const __m512 v = LoadF<kSrc>(df, src, first + j).raw;
        return RoundToInt(VF{_mm512_mul_ps(_mm512_sub_ps(v, vb), vinv)}).raw;
      };
      for (size_t j = 0; j < kGroup; j += kChunk) {
        if constexpr (kBits == 4 && kChunk == 64) {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(gout + j / 2),
                              PackNibbles4x16(code(j), code(j + 16), code(j + 32), code(j + 48)));
          continue;
        }
        __m512i c;
        if constexpr (kChunk == 64) {
          c = PackU8x64(code(j), code(j + 16), code(j + 32), code(j + 48));
        } else {
          const __m512i q0 = code(j), q1 = code(j + 16);
          c = PackU8x64(q0, q1, q0, q1);  // bytes 0..31 are the codes (32..63 repeat them)
        }
        if constexpr (kBits != 8) c = _mm512_min_epu8(c, _mm512_set1_epi8((1 << kBits) - 1));
        if constexpr (kBits == 8) {
          if constexpr (kChunk == 64) {
            _mm512_storeu_si512(gout + j, c);
          } else {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(gout + j), _mm512_castsi512_si256(c));
          }
        } else if constexpr (kBits == 4) {  // kChunk == 32
          const __m256i nib = PackNibbles64(c);
          _mm_storeu_si128(reinterpret_cast<__m128i*>(gout + j / 2), _mm256_castsi256_si128(nib));
        } else {
          if constexpr (kChunk == 64) {
            _mm512_storeu_si512(codes + j, c);
          } else {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + j), _mm512_castsi512_si256(c));
          }
        }
      }
      if constexpr (kBits != 8 && kBits != 4) PackCodes(codes, kGroup, kBits, gout);
    }
  }
}

// q4_0 blocks [b_begin, b_end) (a multiple of 16 blocks), contiguous in src and dst.
// Software-pipelined as QuantizeAffine16: d and 1 / d of batch n + 1 before the codes of n.
template <DType kSrc>
void QuantizeQ4_0x16(const void* src, size_t b_begin, size_t b_end, uint8_t* dst) {
  const DF df;
  struct Batch {
    HWY_ALIGN float id[kWide];
    HWY_ALIGN uint16_t d_bits[kWide];
  };
  Batch batch[2];
  const __m512 off = _mm512_set1_ps(8.5f);
  const __m512i fifteen = _mm512_set1_epi8(15);
  // Dwords 4k (block A's bytes 4k..4k+3) then 4k + 2 (block B's): see below.
  const __m512i pick = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0);
  auto params = [&](size_t b0, Batch& p) KVTIER_QUANT_INLINE_LAMBDA {
    HWY_ALIGN float w_max[kWide], w_min[kWide], max[kWide];
    __m512 lo, hi;
    MinMax16Any<kSrc, 32>(src, b0 * 32, lo, hi);
    // ggml's d comes from the signed value of largest magnitude (first one on a tie): the
    // max or the min, unless both have the same magnitude (then scan), 0 for a zero block.
    const __m512 neg_lo = _mm512_sub_ps(_mm512_setzero_ps(), lo);
    const __m512 zero = _mm512_setzero_ps();
    const __mmask16 take_lo = _mm512_cmp_ps_mask(neg_lo, hi, _CMP_GT_OQ);
    __m512 m = _mm512_mask_blend_ps(take_lo, hi, lo);
    const __mmask16 hi0 = _mm512_cmp_ps_mask(hi, zero, _CMP_EQ_OQ);
    const __mmask16 both0 = hi0 & _mm512_cmp_ps_mask(neg_lo, zero, _CMP_EQ_OQ);
    m = _mm512_maskz_mov_ps(static_cast<__mmask16>(~both0), m);
    const __mmask16 tie = static_cast<__mmask16>(~hi0) & _mm512_cmp_ps_mask(neg_lo, hi, _CMP_EQ_OQ);
    if (tie != 0) {
      _mm512_store_ps(max, m);
      _mm512_store_ps(w_max, hi);
      _mm512_store_ps(w_min, lo);
      for (size_t b = 0; b < kWide; ++b) {
        if ((tie >> b) & 1) {
          max[b] = FirstOfMagnitude<kSrc>(
              static_cast<const uint8_t*>(src) + (b0 + b) * 32 * DTypeSize(kSrc), w_max[b]);
        }
      }
      m = _mm512_load_ps(max);
    }
    const __m512 d = _mm512_div_ps(m, _mm512_set1_ps(-8.0f));
    const __mmask16 nonzero = _mm512_cmp_ps_mask(d, zero, _CMP_NEQ_UQ);  // NaN: nonzero
    _mm512_store_ps(p.id, _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(1.0f), d));
    _mm256_store_si256(reinterpret_cast<__m256i*>(p.d_bits),
                       _mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  };
  if (b_begin < b_end) params(b_begin, batch[0]);
  for (size_t b0 = b_begin, n = 0; b0 < b_end; b0 += kWide, ++n) {
    if (b0 + kWide < b_end) params(b0 + kWide, batch[(n + 1) & 1]);
    const Batch& p = batch[n & 1];
    for (size_t b = 0; b < kWide; b += 2) {  // blocks A = b, B = b + 1
      uint8_t* block_a = dst + (b0 + b) * sizeof(BlockQ4_0);
      uint8_t* block_b = block_a + sizeof(BlockQ4_0);
      std::memcpy(block_a, &p.d_bits[b], 2);
      std::memcpy(block_b, &p.d_bits[b + 1], 2);
      // trunc(x * id + 8.5) (>= 0 for finite input; NaN -> INT32_MIN -> 0 after the packs)
      auto code = [&](size_t blk, size_t j) {
        const __m512 v = LoadF<kSrc>(df, src, (b0 + blk) * 32 + j).raw;
        const __m512 vid = _mm512_set1_ps(p.id[blk]);
        return TruncToInt(VF{_mm512_add_ps(_mm512_mul_ps(v, vid), off)}).raw;
      };
      // Block k (128 bits) of the bytes: A0[4k..], A1[4k..], B0[4k..], B1[4k..] (X0 = values
      // 0..15 of block X, X1 = 16..31), each clamped to [0, 15].
      __m512i c = _mm512_packus_epi16(_mm512_packs_epi32(code(b, 0), code(b, 16)),
                                      _mm512_packs_epi32(code(b + 1, 0), code(b + 1, 16)));
      c = _mm512_min_epu8(c, fifteen);
      // Low dword of each qword: X0[j] | X1[j] << 4 (the bits shifted in from X0 are 0).
      c = _mm512_or_si512(c, _mm512_srli_epi64(c, 28));
      const __m256i ab = _mm512_castsi512_si256(_mm512_permutexvar_epi32(pick, c));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(block_a + 2), _mm256_castsi256_si128(ab));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(block_b + 2), _mm256_extracti128_si256(ab, 1));
    }
  }
}

// Lane b = max |x| over the 32 values of block b (b < 16) from element `first`, NaN ignored
// (the reference's std::max(amax, fabs(x)); maxps returns the running second operand).
template <DType kSrc>
HWY_INLINE __m512 MaxAbs16(const void* src, size_t first) {
  const DF df;
  __m512 q[4];
  for (size_t m = 0; m < 4; ++m) {
    __m512 amax[4];
    for (size_t k = 0; k < 4; ++k) {
      const size_t b = m + 4 * k;
      __m512 mx = _mm512_setzero_ps();
      for (size_t j = 0; j < 32; j += 16) {
        const __m512 v = LoadF<kSrc>(df, src, first + b * 32 + j).raw;
        mx = _mm512_max_ps(_mm512_abs_ps(v), mx);
      }
      amax[k] = mx;
    }
    q[m] = Quarter(amax[0], amax[1], amax[2], amax[3], MaxPs);
  }
  return Finish(q, MaxPs);
}

// MaxAbs16 for an f16 source on the raw bits: with the sign cleared, the unsigned 16-bit
// order of non-NaN halves is their magnitude order, so one and + one integer max per 32
// values and one conversion of the 16 results. Returns false (amax unset) when a block holds
// a NaN (bits above 0x7C00), which the reference skips; the caller then takes MaxAbs16.
HWY_INLINE bool MaxAbs16Half(const void* src, size_t first, __m512& amax) {
  const uint16_t* p = static_cast<const uint16_t*>(src) + first;
  const __m512i magnitude = _mm512_set1_epi16(0x7FFF);
  __m512 q[4];
  for (size_t m = 0; m < 4; ++m) {
    __m512 v[4];
    for (size_t k = 0; k < 4; ++k) {
      v[k] = _mm512_castsi512_ps(
          _mm512_and_si512(_mm512_loadu_si512(p + (m + 4 * k) * 32), magnitude));
    }
    q[m] = Quarter(v[0], v[1], v[2], v[3], UMax16);
  }
  // Dword j holds two partial maxima of block j; fold the high word onto the low one.
  __m512i u = _mm512_castps_si512(Finish(q, UMax16));
  u = _mm512_and_si512(_mm512_max_epu16(u, _mm512_srli_epi32(u, 16)), _mm512_set1_epi32(0xFFFF));
  if (_mm512_cmpgt_epu32_mask(u, _mm512_set1_epi32(0x7C00)) != 0) return false;
  amax = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(u));
  return true;
}

template <DType kSrc>
void QuantizeQ8_0x16(const void* src, size_t b_begin, size_t b_end, uint8_t* dst) {
  const DF df;
  HWY_ALIGN float id[kWide];
  HWY_ALIGN uint16_t d_bits[kWide];
  const __m512 half = _mm512_set1_ps(0.5f);
  const __m512i sign = _mm512_set1_epi32(INT32_MIN);
  const __m512i lo127 = _mm512_set1_epi8(-127);
  // Dwords of block A's 32 bytes (4k, 4k + 1 of block k), then block B's (4k + 2, 4k + 3).
  const __m512i pick = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  for (size_t b0 = b_begin; b0 < b_end; b0 += kWide) {
    __m512 amax;
    if constexpr (kSrc == DType::kF16) {
      if (HWY_UNLIKELY(!MaxAbs16Half(src, b0 * 32, amax))) amax = MaxAbs16<kSrc>(src, b0 * 32);
    } else {
      amax = MaxAbs16<kSrc>(src, b0 * 32);
    }
    const __m512 d = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
    const __mmask16 nonzero = _mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    _mm512_store_ps(id, _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(1.0f), d));
    _mm256_store_si256(reinterpret_cast<__m256i*>(d_bits),
                       _mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (size_t b = 0; b < kWide; b += 2) {
      uint8_t* block_a = dst + (b0 + b) * sizeof(BlockQ8_0);
      uint8_t* block_b = block_a + sizeof(BlockQ8_0);
      std::memcpy(block_a, &d_bits[b], 2);
      std::memcpy(block_b, &d_bits[b + 1], 2);
      // roundf(x * id) as trunc(v + copysign(0.5, v)), exact for |v| < 127.5 (see
      // QuantizeQ8_0); NaN -> INT32_MIN -> -128 after the packs -> -127 after the max.
      auto code = [&](size_t blk, size_t j) {
        const __m512 v = _mm512_mul_ps(LoadF<kSrc>(df, src, (b0 + blk) * 32 + j).raw,
                                       _mm512_set1_ps(id[blk]));
        const __m512 h = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(
            _mm512_castps_si512(half), _mm512_castps_si512(v), sign, 0xF8));  // half | sign(v)
        return TruncToInt(VF{_mm512_add_ps(v, h)}).raw;
      };
      __m512i c = _mm512_packs_epi16(_mm512_packs_epi32(code(b, 0), code(b, 16)),
                                     _mm512_packs_epi32(code(b + 1, 0), code(b + 1, 16)));
      c = _mm512_permutexvar_epi32(pick, _mm512_max_epi8(c, lo127));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(block_a + 2), _mm512_castsi512_si256(c));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(block_b + 2), _mm512_extracti64x4_epi64(c, 1));
    }
  }
}

}  // namespace avx512
