// Rotated codebook rows (rot.h) on the AVX2 / AVX-512 targets: the rotation in vectors (the
// same butterfly stages and operations as RotateRef, so bit-identical), the codebook part of
// each block through rot.h's shared scalar code. Included by quant_simd.cc inside its
// HWY_NAMESPACE and its AVX2-or-better section (uses its DF / VF / LoadF / StoreF).
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

template <int kBits, DType kSrc>
void QuantizeRot(const Format& f, const void* src, size_t n_rows, size_t head_dim, uint8_t* dst) {
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
      QuantizeRotBlock<kBits>(y + b * kRotBlockValues, dst + r * row_bytes + b * bb);
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
