// V side of the int8 q.k path: included by attention_int8.cc inside its anonymous namespace
// (it uses that file's Fmt, Geo, KV_VNNI and KV_INL). Stateless; thread-safe.
//
// Weighted V of one pass of 4 query vectors over n rows: acc[g] = acc[g] * corr[g] +
// sum_t p[4 t + g] * v_t. Each 32-value block's scale is folded into the weights once per token,
// w[t][b][g] = p[4 t + g] * scale(t, b) (lanes 4 b + g, the scales of 4 blocks picked from the
// row's first bytes by one word permute), so the codes only need converting to f32: q4_0
// through a 16-entry table of c - 8, q8_0 and affine8 by a sign / zero extension, affine4 by a
// table of 0..15 (in even / odd value order, restored when the item ends). Affine biases add
// sum_t p[4 t + g] * bias(t, b) to each block's 32 values once per call.
#pragma once

template <size_t kD>
struct VShape {
  static constexpr size_t kNB = kD / 32;                 // 32-value blocks per row
  static constexpr size_t kVecs = (4 * kNB + 15) / 16;  // weight vectors per token
  static constexpr size_t kW = 16 * kVecs;               // floats of a token's weights
};

// Where the scales (and affine biases) of a row's blocks are: weight vector v covers blocks
// 4 v .. 4 v + 3; their f16 scales are words sidx (biases: bidx) of the 128-byte window at byte
// win[v] of the row, read with masks that stop at the row's end.
template <size_t kD>
struct VScaleMap {
  size_t win[VShape<kD>::kVecs] = {};
  __m512i sidx[VShape<kD>::kVecs], bidx[VShape<kD>::kVecs];
  __mmask32 m0[VShape<kD>::kVecs] = {}, m1[VShape<kD>::kVecs] = {};
  bool two = false;  // some index reaches the window's second 64 bytes
};

template <size_t kD, Fmt VF>
KV_VNNI VScaleMap<kD> MakeVScaleMap(const Geo& vg) {
  constexpr size_t kNB = VShape<kD>::kNB;
  constexpr bool kAffine = VF == Fmt::kA8 || VF == Fmt::kA4;
  const size_t row_bytes = VF == Fmt::kQ4_0 ? 18 * kNB : VF == Fmt::kQ8_0 ? 34 * kNB
                                                         : vg.biases_off + 2 * vg.n_groups;
  VScaleMap<kD> m;
  for (size_t v = 0; v < VShape<kD>::kVecs; ++v) {
    m.win[v] = VF == Fmt::kQ4_0 ? 72 * v : VF == Fmt::kQ8_0 ? 136 * v : vg.scales_off;
    alignas(64) int16_t s[32] = {}, b[32] = {};
    for (size_t i = 0; i < 16; ++i) {
      const size_t blk = std::min(4 * v + i / 4, kNB - 1);
      if constexpr (kAffine) {
        const size_t gr = (32 * blk) >> vg.group_shift;
        s[i] = static_cast<int16_t>(gr);
        b[i] = static_cast<int16_t>(vg.n_groups + gr);
      } else {
        s[i] = static_cast<int16_t>((VF == Fmt::kQ4_0 ? 18 * blk : 34 * blk) / 2 - m.win[v] / 2);
      }
      m.two = m.two || s[i] >= 32 || b[i] >= 32;
    }
    m.sidx[v] = _mm512_load_si512(s);
    m.bidx[v] = _mm512_load_si512(b);
    const size_t words = (row_bytes - m.win[v]) / 2;
    m.m0[v] = words >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((uint64_t{1} << words) - 1);
    const size_t w1 = words > 32 ? std::min<size_t>(words - 32, 32) : 0;
    m.m1[v] = w1 >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((uint64_t{1} << w1) - 1);
  }
  return m;
}

// 16 f16 words of the row's window v picked by idx, as f32.
template <size_t kD>
KV_INL __m512 PickHalves(const uint8_t* row, const VScaleMap<kD>& m, size_t v, __m512i idx) {
  const __m512i lo = _mm512_maskz_loadu_epi16(m.m0[v], row + m.win[v]);
  if (!m.two) return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(idx, lo)));
  const __m512i hi = _mm512_maskz_loadu_epi16(m.m1[v], row + m.win[v] + 64);
  return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(lo, idx, hi)));
}

// Codes of block p of a row as f32 (without scale): a holds values 0..15 and b 16..31 (affine4:
// the even values, then the odd ones).
template <Fmt F>
KV_INL void VCodes(const uint8_t* row, size_t p, __m512 table, __m512& a, __m512& b) {
  if constexpr (F == Fmt::kQ4_0 || F == Fmt::kA4) {
    const uint8_t* c = row + (F == Fmt::kQ4_0 ? 18 * p + 2 : 16 * p);
    const __m512i w = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c)));
    a = _mm512_permutexvar_ps(w, table);  // vpermps reads the low 4 bits of each index
    b = _mm512_permutexvar_ps(_mm512_srli_epi32(w, 4), table);
  } else if constexpr (F == Fmt::kQ8_0) {
    const __m128i* c = reinterpret_cast<const __m128i*>(row + 34 * p + 2);
    a = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(c)));
    b = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(c + 1)));
  } else {
    const __m128i* c = reinterpret_cast<const __m128i*>(row + 32 * p);
    a = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(c)));
    b = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(c + 1)));
  }
}

// Weighted V of one pass (see the header comment) over n <= kTile rows from vr (stride vs), p
// the n tokens' probabilities ([n][4]). Not inlined, so that the sweeps' 16 accumulators
// (4 query vectors x 4 chunks) get the registers to themselves.
template <size_t kD, Fmt VF>
__attribute__((noinline)) KV_VNNI void AccumulateV(const uint8_t* vr, size_t vs, uint32_t n,
                                                   const float* p, const float corr[4],
                                                   float* const acc[4], const Geo& vg,
                                                   const VScaleMap<kD>& sm) {
  using S = VShape<kD>;
  constexpr bool kAffine = VF == Fmt::kA8 || VF == Fmt::kA4;
  alignas(64) float w[kTile * S::kW];  // [token][weight lane 4 b + g]
  __m512 bsum[S::kVecs];               // affine: sum_t p * bias, lanes 4 b + g
  for (size_t v = 0; v < S::kVecs; ++v) bsum[v] = _mm512_setzero_ps();
  for (uint32_t t = 0; t < n; ++t) {
    const uint8_t* row = vr + t * vs;
    const __m512 pv = _mm512_broadcast_f32x4(_mm_loadu_ps(p + 4 * t));
    for (size_t v = 0; v < S::kVecs; ++v) {
      _mm512_store_ps(w + t * S::kW + 16 * v, _mm512_mul_ps(PickHalves<kD>(row, sm, v, sm.sidx[v]), pv));
      if constexpr (kAffine) {
        bsum[v] = _mm512_fmadd_ps(PickHalves<kD>(row, sm, v, sm.bidx[v]), pv, bsum[v]);
      }
    }
  }
  const __m512 table = VF == Fmt::kQ4_0
                           ? _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7)
                           : _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  constexpr size_t kCG = 4;  // V chunks (16 values, half a block) per sweep
  for (size_t c0 = 0; c0 < kD / 16; c0 += kCG) {
    __m512 o[4][kCG];
    for (size_t g = 0; g < 4; ++g) {
      const __m512 cg = _mm512_set1_ps(corr[g]);
      for (size_t c = 0; c < kCG; ++c) o[g][c] = _mm512_mul_ps(_mm512_loadu_ps(acc[g] + (c0 + c) * 16), cg);
    }
    for (uint32_t t = 0; t < n; ++t) {
      __m512 x[kCG];
      for (size_t c = 0; c < kCG; c += 2) VCodes<VF>(vr + t * vs, (c0 + c) / 2, table, x[c], x[c + 1]);
      const float* wt = w + t * S::kW + 4 * (c0 / 2);
      for (size_t g = 0; g < 4; ++g) {
        for (size_t c = 0; c < kCG; ++c) {
          o[g][c] = _mm512_fmadd_ps(_mm512_set1_ps(wt[4 * (c / 2) + g]), x[c], o[g][c]);
        }
      }
    }
    for (size_t g = 0; g < 4; ++g) {
      for (size_t c = 0; c < kCG; ++c) _mm512_storeu_ps(acc[g] + (c0 + c) * 16, o[g][c]);
    }
  }
  if constexpr (kAffine) {  // + sum_t p * bias over each block's 32 values
    alignas(64) float bs[S::kW];
    for (size_t v = 0; v < S::kVecs; ++v) _mm512_store_ps(bs + 16 * v, bsum[v]);
    for (size_t b = 0; b < S::kNB; ++b) {
      for (size_t g = 0; g < 4; ++g) {
        const __m512 x = _mm512_set1_ps(bs[4 * b + g]);
        float* a = acc[g] + 32 * b;
        _mm512_storeu_ps(a, _mm512_add_ps(_mm512_loadu_ps(a), x));
        _mm512_storeu_ps(a + 16, _mm512_add_ps(_mm512_loadu_ps(a + 16), x));
      }
    }
  }
}
