// Rotated codebook rows (rot.h) on the AVX2 / AVX-512 targets: the rotation in vectors (the
// same butterfly stages and operations as RotateRef, so bit-identical), the codebook fit of
// each block in vectors too (QuantizeRotBlockVec: same operations, same summation order; on
// AVX-512, quantizing takes 16 rows at once instead: rot_simd_avx512-inl.h). Included by
// quant_simd.cc inside its HWY_NAMESPACE and its AVX2-or-better section (uses its DF / VF /
// LoadF / StoreF).
// Pure functions; thread-safe.

// Sign masks of a row under a seed (0 or the sign bit, per value) for one call.
struct RotSigns {
  uint32_t bits[512];  // [head_dim <= 512]
  void Fill(uint8_t seed, size_t n) {
    for (size_t i = 0; i < n; ++i) bits[i] = RotSignFlipped(seed, i) ? 0x80000000u : 0u;
  }
};

// Unnormalised Walsh-Hadamard of b values (b a power of two, b >= lanes) in place; stages as
// FwhtRef: below the vector length, the partner x[j ^ h] comes from a lane permutation and
// the lower lane keeps a + c, the upper a - c.
HWY_INLINE void FwhtVec(float* HWY_RESTRICT x, size_t b) {
  const DF df;
  const DI di;
  const size_t N = hn::Lanes(df);
  const auto iota = hn::Iota(di, 0);
  size_t h = 1;
  for (; h < N && h < b; h *= 2) {
    const auto idx = hn::IndicesFromVec(df, hn::Xor(iota, hn::Set(di, static_cast<int32_t>(h))));
    const auto lower = hn::RebindMask(df, hn::Eq(hn::And(iota, hn::Set(di, static_cast<int32_t>(h))),
                                                 hn::Zero(di)));
    for (size_t i = 0; i < b; i += N) {
      const VF v = hn::LoadU(df, x + i);
      const VF p = hn::TableLookupLanes(v, idx);
      hn::StoreU(hn::IfThenElse(lower, hn::Add(v, p), hn::Sub(p, v)), df, x + i);
    }
  }
  for (; h < b; h *= 2) {
    for (size_t i = 0; i < b; i += 2 * h) {
      for (size_t j = i; j < i + h; j += N) {
        const VF a = hn::LoadU(df, x + j), c = hn::LoadU(df, x + j + h);
        hn::StoreU(hn::Add(a, c), df, x + j);
        hn::StoreU(hn::Sub(a, c), df, x + j + h);
      }
    }
  }
}

HWY_INLINE void FlipSigns(float* HWY_RESTRICT x, const uint32_t* HWY_RESTRICT sign, size_t n) {
  const DF df;
  const DU du;
  const size_t N = hn::Lanes(df);
  for (size_t i = 0; i < n; i += N) {
    const auto v = hn::BitCast(du, hn::LoadU(df, x + i));
    hn::StoreU(hn::BitCast(df, hn::Xor(v, hn::LoadU(du, sign + i))), df, x + i);
  }
}

// RotateRef in vectors (n a multiple of 32).
HWY_INLINE void RotateVec(float* HWY_RESTRICT x, size_t n, const RotSigns& s, bool inverse) {
  const DF df;
  const size_t N = hn::Lanes(df);
  if (!inverse) FlipSigns(x, s.bits, n);
  for (size_t off = 0; off < n;) {
    const size_t b = RotBlockAt(n, off);
    FwhtVec(x + off, b);
    const VF c = hn::Set(df, RotNorm(b));
    for (size_t i = off; i < off + b; i += N) hn::StoreU(hn::Mul(hn::LoadU(df, x + i), c), df, x + i);
    off += b;
  }
  if (inverse) FlipSigns(x, s.bits, n);
}

// RotBlockSum of the 32 values in a[0 .. kV) (in order) without leaving the registers: its
// fixed order is a halving tree. 16 lanes: t = a[0] + a[1] (t_j = a_j + a_16+j), then
// p_j = t_j + t_8+j; 8 lanes: p_j = (a_j + a_16+j) + (a_8+j + a_24+j); then
// ((p0 + p4) + (p2 + p6)) + ((p1 + p5) + (p3 + p7)) by halves. The same additions as
// RotBlockSum (float addition commutes exactly), so the same sum bit for bit.
// (V is VF: a template parameter, so that the branch for the other vector width is not
// checked where it cannot apply.)
template <size_t kV, class V>
HWY_INLINE float RotBlockSumVec(const V* HWY_RESTRICT a) {
  [[maybe_unused]] const hn::Half<hn::DFromV<V>> dh;
  using D8 = hn::Simd<float, 8, 0>;
  hn::Vec<D8> p;
  if constexpr (kV == 2) {
    const V t = hn::Add(a[0], a[1]);
    p = hn::Add(hn::LowerHalf(dh, t), hn::UpperHalf(dh, t));
  } else {
    static_assert(kV == 4, "8 or 16 lanes");
    p = hn::Add(hn::Add(a[0], a[2]), hn::Add(a[1], a[3]));
  }
  const hn::Half<D8> d4;
  const auto w = hn::Add(hn::LowerHalf(d4, p), hn::UpperHalf(d4, p));  // p_j + p_4+j
  const auto x = hn::Add(w, hn::Shuffle1032(w));                       // w_j + w_2+j
  return hn::GetLane(hn::Add(x, hn::Shuffle2301(x)));
}

// One block of 32 rotated values on vectors of 8 or 16 lanes: QuantizeRotBlock's steps with
// the same operations per value and the same summation order (RotBlockSum), so the same
// bytes. y: [32] (aligned). The codes (the number of midpoints at or below y / d): with 16
// lanes a branch-free binary search over the sorted midpoints (kBits compares, each against a
// midpoint picked by a lane permute), which counts the same; with 8 lanes a compare per
// midpoint.
template <int kBits>
HWY_INLINE void QuantizeRotBlockVec(const float* HWY_RESTRICT y, uint8_t* HWY_RESTRICT block) {
  const DF df;
  const DI di;
  constexpr size_t kMaxN = hn::MaxLanes(DF());
  static_assert(kMaxN == 8 || kMaxN == 16, "rot: AVX2 or AVX-512 vectors");
  constexpr size_t kV = kRotBlockValues / kMaxN;  // vectors per block
  const size_t N = hn::Lanes(df);
  static constexpr RotMids<kBits> kMids;
  const float* L = RotLevels<kBits>();
  VF v[kV];
  // The first value of largest magnitude (NaN never wins, as in the reference).
  VF amax = hn::Zero(df);
  for (size_t k = 0; k < kV; ++k) {
    v[k] = hn::Load(df, y + k * N);
    const VF a = hn::Abs(v[k]);
    amax = hn::Max(amax, hn::IfThenElseZero(hn::Eq(a, a), a));
  }
  const float am = hn::GetLane(hn::MaxOfLanes(df, amax));
  HWY_ALIGN uint8_t codes[kRotBlockValues] = {};
  float d = 0.0f;
  if (am > 0.0f && std::isfinite(am)) {
    const VF vam = hn::Set(df, am);
    for (size_t k = 0; k < kV; ++k) {
      const intptr_t at = hn::FindFirstTrue(df, hn::Eq(hn::Abs(v[k]), vam));
      if (at >= 0) {
        d = y[k * N + static_cast<size_t>(at)];
        break;
      }
    }
    struct Padded {
      float v[16];
    };
    static constexpr Padded kPadded = [] {
      Padded p{};
      for (int i = 0; i < (1 << kBits); ++i) p.v[i] = RotLevels<kBits>()[i];
      return p;
    }();
    static constexpr Padded kMidPad = [] {
      Padded p{};
      for (int i = 0; i + 1 < (1 << kBits); ++i) p.v[i] = RotMids<kBits>().m[i];
      return p;
    }();
    const VF table = hn::LoadU(df, kPadded.v);  // first N levels (N = 16: all of them)
    const VF mids = hn::LoadU(df, kMidPad.v);   // N = 16: every midpoint
    hn::Vec<DI> c[kV];
    for (int pass = 0; pass < 2; ++pass) {
      const VF inv = hn::Set(df, 1.0f / d);
      VF xl[kV], ll[kV];
      for (size_t k = 0; k < kV; ++k) {
        const VF q = hn::Mul(v[k], inv);
        VF l;
        if constexpr (kMaxN == 16) {  // the levels and midpoints fit one register each
          c[k] = hn::Zero(di);
          for (int step = 1 << (kBits - 1); step >= 1; step /= 2) {
            const auto at = hn::Add(c[k], hn::Set(di, step - 1));
            const VF mid = hn::TableLookupLanes(mids, hn::IndicesFromVec(df, at));
            c[k] = hn::IfThenElse(hn::RebindMask(di, hn::Ge(q, mid)), hn::Add(c[k], hn::Set(di, step)), c[k]);
          }
          l = hn::TableLookupLanes(table, hn::IndicesFromVec(df, c[k]));
        } else {
          c[k] = hn::Zero(di);
          for (int t = 0; t + 1 < (1 << kBits); ++t) {
            c[k] = hn::Sub(c[k], hn::VecFromMask(di, hn::RebindMask(di, hn::Ge(q, hn::Set(df, kMids.m[t])))));
          }
          l = hn::GatherIndex(df, L, c[k]);
        }
        xl[k] = hn::Mul(v[k], l);
        ll[k] = hn::Mul(l, l);
      }
      const float sxl = RotBlockSumVec<kV>(xl), sll = RotBlockSumVec<kV>(ll);
      d = sll > 0.0f ? sxl / sll : d;
    }
    const hn::Rebind<uint8_t, DI> d8;
    for (size_t k = 0; k < kV; ++k) hn::Store(hn::DemoteTo(d8, c[k]), d8, codes + k * N);
  }
  const uint16_t dh = F32ToF16(d);
  std::memcpy(block, &dh, 2);
  PackRotCodes<kBits>(codes, block + 2);
}

#if HWY_TARGET <= HWY_AVX3
#include "quant/rot_simd_avx512-inl.h"
#endif

template <int kBits, DType kSrc>
void QuantizeRot(const Format& f, const void* src, size_t n_rows, size_t head_dim, uint8_t* dst) {
#if HWY_TARGET <= HWY_AVX3
  return rot512::QuantizeRot16<kBits, kSrc>(f, src, n_rows, head_dim, dst);
#endif
  const DF df;
  const size_t N = hn::Lanes(df);
  RotSigns s;
  s.Fill(f.seed, head_dim);
  HWY_ALIGN float y[512];
  const size_t row_bytes = f.row_bytes(head_dim);
  const size_t bb = RotBlockBytes(kBits);
  for (size_t r = 0; r < n_rows; ++r) {
    for (size_t i = 0; i < head_dim; i += N) hn::Store(LoadF<kSrc>(df, src, r * head_dim + i), df, y + i);
    RotateVec(y, head_dim, s, false);
    for (size_t b = 0; b < head_dim / kRotBlockValues; ++b) {
      QuantizeRotBlockVec<kBits>(y + b * kRotBlockValues, dst + r * row_bytes + b * bb);
    }
  }
}

// Rows -> values in the rotated basis (rotate_back false) or the original one, as kDst.
template <int kBits, DType kDst>
void DequantizeRot(const Format& f, const uint8_t* src, size_t src_stride, size_t n_rows,
                   size_t head_dim, bool rotate_back, void* dst) {
  const DF df;
  const size_t N = hn::Lanes(df);
  RotSigns s;
  if (rotate_back) s.Fill(f.seed, head_dim);
  const float* L = RotLevels<kBits>();
  const size_t bb = RotBlockBytes(kBits);
  HWY_ALIGN float y[512];
  uint8_t codes[kRotBlockValues];
  for (size_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = src + r * src_stride;
    for (size_t b = 0; b < head_dim / kRotBlockValues; ++b) {
      const float d = UnpackRotBlock<kBits>(row + b * bb, codes);
      float* yb = y + b * kRotBlockValues;
      for (size_t i = 0; i < kRotBlockValues; ++i) yb[i] = L[codes[i]];
      const VF vd = hn::Set(df, d);
      for (size_t i = 0; i < kRotBlockValues; i += N) hn::Store(hn::Mul(hn::Load(df, yb + i), vd), df, yb + i);
    }
    if (rotate_back) RotateVec(y, head_dim, s, true);
    for (size_t i = 0; i < head_dim; i += N) StoreF<kDst>(df, hn::Load(df, y + i), dst, r * head_dim + i);
  }
}

template <DType kSrc>
bool QuantizeRotBits(const Format& f, const void* src, size_t n_rows, size_t head_dim, uint8_t* dst) {
  if (head_dim > 512) return false;
  switch (f.bits) {
    case 2: QuantizeRot<2, kSrc>(f, src, n_rows, head_dim, dst); return true;
    case 3: QuantizeRot<3, kSrc>(f, src, n_rows, head_dim, dst); return true;
    case 4: QuantizeRot<4, kSrc>(f, src, n_rows, head_dim, dst); return true;
    default: return false;
  }
}

template <DType kDst>
bool DequantizeRotBits(const Format& f, const uint8_t* src, size_t s, size_t n_rows,
                       size_t head_dim, bool rotate_back, void* dst) {
  if (head_dim > 512) return false;
  switch (f.bits) {
    case 2: DequantizeRot<2, kDst>(f, src, s, n_rows, head_dim, rotate_back, dst); return true;
    case 3: DequantizeRot<3, kDst>(f, src, s, n_rows, head_dim, rotate_back, dst); return true;
    case 4: DequantizeRot<4, kDst>(f, src, s, n_rows, head_dim, rotate_back, dst); return true;
    default: return false;
  }
}
