// Rotated codebook rows (rot.h) quantized on AVX-512, 16 rows at once, one row per float lane:
// the rows are transposed as they are loaded (vector j = value j of the 16 rows), so the
// Hadamard butterflies are plain vertical adds and subtracts and each 32-value block is fitted
// in 16 lanes at once (16 blocks per pass), with no horizontal step at all. Every value goes
// through QuantizeRotBlock's operations in the same order (signs, the same butterfly stages,
// the normalisation, the first largest magnitude, two passes of codes and least squares with
// RotBlockSum's summation tree, the f16 scale), so the bytes equal the reference's; the codes
// come from RotCellTable's cells (a permute, one compare) instead of a compare per midpoint.
//
// Not a standalone header: rot_simd-inl.h includes it inside quant_simd.cc's per-target
// namespace, in the AVX3 targets only (uses LoadF). Pure functions; thread-safe.

namespace rot512 {

constexpr size_t kLanes = 16;  // rows per batch

// a[i] = lane l holds row i's value l -> a[j] = lane i holds row i's value j (16 x 16).
HWY_INLINE void Transpose16(__m512* a) {
  __m512 t[16];
#pragma GCC unroll 8
  for (size_t k = 0; k < 16; k += 2) {
    t[k] = _mm512_unpacklo_ps(a[k], a[k + 1]);
    t[k + 1] = _mm512_unpackhi_ps(a[k], a[k + 1]);
  }
  // u[4k + e], 128-bit block q: rows 4k .. 4k + 3, value 4q + e.
  __m512 u[16];
#pragma GCC unroll 4
  for (size_t k = 0; k < 16; k += 4) {
    u[k] = _mm512_shuffle_ps(t[k], t[k + 2], 0x44);
    u[k + 1] = _mm512_shuffle_ps(t[k], t[k + 2], 0xEE);
    u[k + 2] = _mm512_shuffle_ps(t[k + 1], t[k + 3], 0x44);
    u[k + 3] = _mm512_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (size_t e = 0; e < 4; ++e) {
    const __m512 x = _mm512_shuffle_f32x4(u[e], u[4 + e], 0x88);
    const __m512 y = _mm512_shuffle_f32x4(u[e], u[4 + e], 0xDD);
    const __m512 z = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0x88);
    const __m512 w = _mm512_shuffle_f32x4(u[8 + e], u[12 + e], 0xDD);
    a[e] = _mm512_shuffle_f32x4(x, z, 0x88);
    a[8 + e] = _mm512_shuffle_f32x4(x, z, 0xDD);
    a[4 + e] = _mm512_shuffle_f32x4(y, w, 0x88);
    a[12 + e] = _mm512_shuffle_f32x4(y, w, 0xDD);
  }
}

// The butterfly stages of distances 1, 2, .., 2^(kS-1) (in units of the caller's stride) on
// v[0 .. 2^kS): FwhtRef's (a, c) -> (a + c, a - c), stage by stage.
template <int kS>
HWY_INLINE void Stages(__m512* v) {
#pragma GCC unroll 4
  for (int st = 0; st < kS; ++st) {
    const int h = 1 << st;
#pragma GCC unroll 16
    for (int i = 0; i < (1 << kS); i += 2 * h) {
#pragma GCC unroll 16
      for (int j = i; j < i + h; ++j) {
        const __m512 a = v[j], c = v[j + h];
        v[j] = _mm512_add_ps(a, c);
        v[j + h] = _mm512_sub_ps(a, c);
      }
    }
  }
}

// Stages h0, 2 h0, .., h0 << (kS - 1) of a Hadamard block of b vectors x[0 .. b), in
// registers 2^kS vectors at a time; the last pass of a block also normalises (x c).
template <int kS>
HWY_INLINE void Pass(__m512* HWY_RESTRICT x, size_t b, size_t h0, bool last, __m512 c) {
  const size_t span = h0 << kS;
  for (size_t hi = 0; hi < b; hi += span) {
    for (size_t lo = 0; lo < h0; ++lo) {
      __m512* p = x + hi + lo;
      __m512 v[1 << kS];
#pragma GCC unroll 16
      for (int m = 0; m < (1 << kS); ++m) v[m] = p[m * h0];
      Stages<kS>(v);
      if (last) {
#pragma GCC unroll 16
        for (int m = 0; m < (1 << kS); ++m) v[m] = _mm512_mul_ps(v[m], c);
      }
#pragma GCC unroll 16
      for (int m = 0; m < (1 << kS); ++m) p[m * h0] = v[m];
    }
  }
}

// y[0 .. head_dim) (vector j: value j of rows 0..15, rows >= nr zero) = R x of the 16 rows
// at src (rows of head_dim values of kSrc). sign: [head_dim] 0 or the sign bit.
template <DType kSrc>
HWY_NOINLINE void LoadRotate(const void* src, size_t nr, size_t head_dim,
                           const uint32_t* HWY_RESTRICT sign, __m512* HWY_RESTRICT y) {
  const DF df;
  // Values j0 .. j0 + 15 lie in one Hadamard block (blocks are >= 32 and aligned): stages
  // 1, 2, 4, 8 right after the transpose.
  for (size_t j0 = 0; j0 < head_dim; j0 += kLanes) {
    __m512 v[kLanes];
    if (nr == kLanes) {
#pragma GCC unroll 16
      for (size_t i = 0; i < kLanes; ++i) v[i] = LoadF<kSrc>(df, src, i * head_dim + j0).raw;
    } else {
      for (size_t i = 0; i < kLanes; ++i) {
        v[i] = i < nr ? LoadF<kSrc>(df, src, i * head_dim + j0).raw : _mm512_setzero_ps();
      }
    }
    Transpose16(v);
#pragma GCC unroll 16
    for (size_t i = 0; i < kLanes; ++i) {
      v[i] = _mm512_castsi512_ps(
          _mm512_xor_si512(_mm512_castps_si512(v[i]), _mm512_set1_epi32(static_cast<int>(sign[j0 + i]))));
    }
    Stages<4>(v);
#pragma GCC unroll 16
    for (size_t i = 0; i < kLanes; ++i) y[j0 + i] = v[i];
  }
  for (size_t off = 0; off < head_dim;) {
    const size_t b = RotBlockAt(head_dim, off);
    const __m512 c = _mm512_set1_ps(RotNorm(b));
    int left = 0;
    while ((size_t{16} << left) < b) ++left;  // stages 16 .. b / 2
    size_t h0 = 16;
    while (left > 0) {
      const int s = left < 4 ? left : 4;
      const bool last = s == left;
      switch (s) {
        case 1: Pass<1>(y + off, b, h0, last, c); break;
        case 2: Pass<2>(y + off, b, h0, last, c); break;
        case 3: Pass<3>(y + off, b, h0, last, c); break;
        default: Pass<4>(y + off, b, h0, last, c); break;
      }
      h0 <<= s;
      left -= s;
    }
    off += b;
  }
}

// Lane-wise codes of q: RotCellTable's search (the number of midpoints at or below q).
template <int kBits>
HWY_INLINE __m512i Codes(__m512 q, __m512i first_lo, __m512i first_hi, __m512 mids) {
  using T = RotCellTable<kBits>;
  const __m512 a = _mm512_set1_ps(T::kA);
  // vrangeps 2: the smaller magnitude of q and 1, with q's sign (NaN stays NaN).
  const __m512 t = _mm512_fmadd_ps(_mm512_range_ps(q, _mm512_set1_ps(1.0f), 2), a, a);
  const __m512i cell = _mm512_cvttps_epi32(t);  // NaN: INT32_MIN, cell 0 (low bits)
  __m512i first;
  if constexpr (T::kCells == 32) {
    first = _mm512_permutex2var_epi32(first_lo, cell, first_hi);
  } else {
    (void)first_hi;
    first = _mm512_permutexvar_epi32(cell, first_lo);
  }
  const __m512 mid = _mm512_permutexvar_ps(first, mids);
  return _mm512_mask_add_epi32(first, _mm512_cmp_ps_mask(q, mid, _CMP_GE_OQ), first, _mm512_set1_epi32(1));
}

// The 32-value blocks of 16 rows, y[0 .. 32) (vector j: value j of the 16 blocks), fitted as
// QuantizeRotBlock does and written to out + r * row_bytes for rows r < nr.
template <int kBits>
HWY_NOINLINE void FitBlocks(const __m512* HWY_RESTRICT y, uint8_t* HWY_RESTRICT out, size_t row_bytes,
                          size_t nr) {
  static constexpr RotCellTable<kBits> kT;
  struct Pad16 {
    float v[16];
  };
  static constexpr Pad16 kLev = [] {
    Pad16 p{};
    for (int i = 0; i < (1 << kBits); ++i) p.v[i] = RotLevels<kBits>()[i];
    return p;
  }();
  const __m512i first_lo = _mm512_loadu_si512(kT.first);
  __m512i first_hi = first_lo;
  if constexpr (RotCellTable<kBits>::kCells == 32) first_hi = _mm512_loadu_si512(kT.first + 16);
  const __m512 mids = _mm512_loadu_ps(kT.mid);
  const __m512 levels = _mm512_loadu_ps(kLev.v);
  const __m512 zero = _mm512_setzero_ps();
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));

  // The first value of largest magnitude of each block (strictly greater: NaN never wins),
  // as four scans of 8 values merged in order (an earlier scan wins a tie), so that four
  // compare -> select chains run at once.
  __m512 am4[4], m4[4];
#pragma GCC unroll 4
  for (size_t s = 0; s < 4; ++s) {
    am4[s] = _mm512_and_ps(y[8 * s], abs_mask);
    m4[s] = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(am4[s], zero, _CMP_GT_OQ), y[8 * s]);
    am4[s] = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(am4[s], zero, _CMP_GT_OQ), am4[s]);
  }
#pragma GCC unroll 8
  for (size_t j = 1; j < 8; ++j) {
#pragma GCC unroll 4
    for (size_t s = 0; s < 4; ++s) {
      const __m512 v = y[8 * s + j];
      const __m512 a = _mm512_and_ps(v, abs_mask);
      const __mmask16 gt = _mm512_cmp_ps_mask(a, am4[s], _CMP_GT_OQ);
      am4[s] = _mm512_mask_mov_ps(am4[s], gt, a);
      m4[s] = _mm512_mask_mov_ps(m4[s], gt, v);
    }
  }
  __m512 am = am4[0], m = m4[0];
#pragma GCC unroll 4
  for (size_t s = 1; s < 4; ++s) {
    const __mmask16 gt = _mm512_cmp_ps_mask(am4[s], am, _CMP_GT_OQ);
    am = _mm512_mask_mov_ps(am, gt, am4[s]);
    m = _mm512_mask_mov_ps(m, gt, m4[s]);
  }
  const __mmask16 valid = static_cast<__mmask16>(
      _mm512_cmp_ps_mask(am, zero, _CMP_GT_OQ) &
      _mm512_cmp_ps_mask(am, _mm512_set1_ps(std::numeric_limits<float>::infinity()), _CMP_LT_OQ));

  // The codes of the last pass go straight into kBits little-endian 32-bit words per block
  // (PackRotCodes' bit stream).
  __m512i w[4];
  for (size_t k = 0; k < 4; ++k) w[k] = _mm512_setzero_si512();
  auto pack = [&](size_t i, __m512i code) {
    const size_t bit = i * kBits, k = bit / 32, sh = bit % 32;
    w[k] = _mm512_or_si512(w[k], _mm512_sllv_epi32(code, _mm512_set1_epi32(static_cast<int>(sh))));
    if (sh + kBits > 32) {
      w[k + 1] = _mm512_or_si512(w[k + 1], _mm512_srlv_epi32(code, _mm512_set1_epi32(static_cast<int>(32 - sh))));
    }
  };
  __m512 d = m;
#pragma GCC unroll 2
  for (int pass = 0; pass < 2; ++pass) {
    const __m512 inv = _mm512_div_ps(_mm512_set1_ps(1.0f), d);
    // RotBlockSum: p_j = (a_j + a_16+j) + (a_8+j + a_24+j), then
    // ((p0 + p4) + (p2 + p6)) + ((p1 + p5) + (p3 + p7)), combined as the p_j come (j in the
    // order 0 4 2 6 1 5 3 7), so that few partial sums stay live.
    __m512 part_xl[2], part_ll[2], pair_xl = zero, pair_ll = zero;
#pragma GCC unroll 8
    for (size_t n = 0; n < 8; ++n) {
      constexpr size_t kOrder[8] = {0, 4, 2, 6, 1, 5, 3, 7};
      const size_t j = kOrder[n];
      const size_t at[4] = {j, 16 + j, 8 + j, 24 + j};
      __m512 xl[4], ll[4];
#pragma GCC unroll 4
      for (size_t t = 0; t < 4; ++t) {
        const __m512 v = y[at[t]];
        const __m512i code = Codes<kBits>(_mm512_mul_ps(v, inv), first_lo, first_hi, mids);
        if (pass == 1) pack(at[t], code);
        const __m512 l = _mm512_permutexvar_ps(code, levels);
        xl[t] = _mm512_mul_ps(v, l);
        ll[t] = _mm512_mul_ps(l, l);
      }
      const __m512 pxl = _mm512_add_ps(_mm512_add_ps(xl[0], xl[1]), _mm512_add_ps(xl[2], xl[3]));
      const __m512 pll = _mm512_add_ps(_mm512_add_ps(ll[0], ll[1]), _mm512_add_ps(ll[2], ll[3]));
      if (n % 2 == 0) {  // p0, p2, p1, p3
        pair_xl = pxl;
        pair_ll = pll;
      } else {           // + p4, p6, p5, p7
        const __m512 qxl = _mm512_add_ps(pair_xl, pxl), qll = _mm512_add_ps(pair_ll, pll);
        if (n % 4 == 1) {
          part_xl[n / 4] = qxl;  // p0 + p4, p1 + p5
          part_ll[n / 4] = qll;
        } else {                 // (.. ) + (p2 + p6), (..) + (p3 + p7)
          part_xl[n / 4] = _mm512_add_ps(part_xl[n / 4], qxl);
          part_ll[n / 4] = _mm512_add_ps(part_ll[n / 4], qll);
        }
      }
    }
    const __m512 sxl = _mm512_add_ps(part_xl[0], part_xl[1]), sll = _mm512_add_ps(part_ll[0], part_ll[1]);
    d = _mm512_mask_div_ps(d, _mm512_cmp_ps_mask(sll, zero, _CMP_GT_OQ), sxl, sll);
  }
  d = _mm512_maskz_mov_ps(valid, d);

  for (size_t k = 0; k < 4; ++k) w[k] = _mm512_maskz_mov_epi32(valid, w[k]);

  // Rows' words: 4 x 16 -> 16 x 4 (block q of r[e] holds row 4q + e's words).
  const __m512i t0 = _mm512_unpacklo_epi32(w[0], w[1]), t1 = _mm512_unpackhi_epi32(w[0], w[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(w[2], w[3]), t3 = _mm512_unpackhi_epi32(w[2], w[3]);
  alignas(64) uint32_t rows[4][16];  // [e][4 q + k]: row 4q + e, word k
  _mm512_store_si512(rows[0], _mm512_unpacklo_epi64(t0, t2));
  _mm512_store_si512(rows[1], _mm512_unpackhi_epi64(t0, t2));
  _mm512_store_si512(rows[2], _mm512_unpacklo_epi64(t1, t3));
  _mm512_store_si512(rows[3], _mm512_unpackhi_epi64(t1, t3));
  alignas(32) uint16_t dh[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(dh),
                     _mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  constexpr size_t kCodeBytes = kRotBlockValues * kBits / 8;
  for (size_t r = 0; r < nr; ++r) {
    uint8_t* o = out + r * row_bytes;
    std::memcpy(o, &dh[r], 2);
    std::memcpy(o + 2, &rows[r % 4][4 * (r / 4)], kCodeBytes);
  }
}

// Rows of head_dim (a multiple of 32, <= 512) values of kSrc -> rot rows, 16 at a time.
template <int kBits, DType kSrc>
void QuantizeRot16(const Format& f, const void* src, size_t n_rows, size_t head_dim, uint8_t* dst) {
  alignas(64) uint32_t sign[512];  // [head_dim]
  for (size_t w = 0; w * 64 < head_dim; ++w) {
    const uint64_t bits = RotSignWord(f.seed, w);
    for (size_t i = 0; i < 64 && w * 64 + i < head_dim; ++i) sign[w * 64 + i] = (bits >> i) & 1 ? 0x80000000u : 0u;
  }
  alignas(64) __m512 y[512];  // [head_dim] x 16 rows
  const size_t row_bytes = f.row_bytes(head_dim), bb = RotBlockBytes(kBits);
  const size_t src_row = head_dim * DTypeSize(kSrc);
  for (size_t r0 = 0; r0 < n_rows; r0 += kLanes) {
    const size_t nr = n_rows - r0 < kLanes ? n_rows - r0 : kLanes;
    LoadRotate<kSrc>(static_cast<const uint8_t*>(src) + r0 * src_row, nr, head_dim, sign, y);
    for (size_t b = 0; b < head_dim / kRotBlockValues; ++b) {
      FitBlocks<kBits>(y + b * kRotBlockValues, dst + r0 * row_bytes + b * bb, row_bytes, nr);
    }
  }
}

}  // namespace rot512
