// Highway SIMD dequantizers of the weights-module block types (see dequant_simd.h). Codes are
// widened to i32 lanes, converted to f32 and scaled with separate multiply and add/subtract
// (never fused: this target compiles with -ffp-contract=off), in the reference's order, so
// the output equals weights/dequant_ref.cc bit for bit. Vectors are capped at 16 lanes: every
// scale group is 16 or 32 values. Stateless; thread-safe.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "weights/dequant_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <cstring>

#include "base/half.h"
#include "kvtier/gguf.h"
#include "weights/blocks.h"
#include "weights/dequant_simd.h"

HWY_BEFORE_NAMESPACE();
namespace kvtier::weights::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 16>;
using DI = hn::RebindToSigned<DF>;
using D8 = hn::Rebind<uint8_t, DF>;
using VF = hn::Vec<DF>;
using VI = hn::Vec<DI>;

// Bytes p[0 .. N) widened to i32 lanes.
HWY_INLINE VI Bytes(const uint8_t* p) {
  const DI di;
  const D8 d8;
  return hn::BitCast(di, hn::PromoteTo(hn::RebindToUnsigned<DF>(), hn::LoadU(d8, p)));
}

// y = f32(q) * d (+ m): multiply, then add (no fused multiply-add).
HWY_INLINE void StoreMulAdd(VI q, float d, float m, float* y) {
  const DF df;
  hn::StoreU(hn::Add(hn::Mul(hn::ConvertTo(df, q), hn::Set(df, d)), hn::Set(df, m)), df, y);
}
HWY_INLINE void StoreMul(VI q, float d, float* y) {
  const DF df;
  hn::StoreU(hn::Mul(hn::ConvertTo(df, q), hn::Set(df, d)), df, y);
}
// y = d * f32(q) - m.
HWY_INLINE void StoreMulSub(VI q, float d, float m, float* y) {
  const DF df;
  hn::StoreU(hn::Sub(hn::Mul(hn::Set(df, d), hn::ConvertTo(df, q)), hn::Set(df, m)), df, y);
}
// y = d * codebook[q] (iq4_nl / iq4_xs).
HWY_INLINE void StoreIQ4(VI q, float d, float* y) {
  const DF df;
  HWY_ALIGN static constexpr float kTable[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                 1,    13,   25,  38,  53,  69,  89,  113};
  hn::StoreU(hn::Mul(hn::Set(df, d), hn::GatherIndex(df, kTable, q)), df, y);
}

// Bit (j + i) of qh as 16 or 0 in lane i.
HWY_INLINE VI HighBit16(uint32_t qh, size_t j) {
  const DI di;
  const auto bits = hn::Shr(hn::Set(di, static_cast<int32_t>(qh)), hn::Iota(di, static_cast<int32_t>(j)));
  return hn::ShiftLeft<4>(hn::And(bits, hn::Set(di, 1)));
}

void DecodeQ4_1(const BlockQ4_1* x, size_t nb, float* y) {
  const size_t N = hn::Lanes(DF());
  const DI di;
  for (size_t i = 0; i < nb; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d), m = F16ToF32(x[i].m);
    for (size_t j = 0; j < 16; j += N) {
      const VI b = Bytes(x[i].qs + j);
      StoreMulAdd(hn::And(b, hn::Set(di, 15)), d, m, y + j);
      StoreMulAdd(hn::ShiftRight<4>(b), d, m, y + j + 16);
    }
  }
}

template <bool kMin, class B>
void DecodeQ5(const B* x, size_t nb, float* y) {
  const size_t N = hn::Lanes(DF());
  const DI di;
  for (size_t i = 0; i < nb; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d);
    float m = 0.0f;
    if constexpr (kMin) m = F16ToF32(x[i].m);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (size_t j = 0; j < 16; j += N) {
      const VI b = Bytes(x[i].qs + j);
      VI q0 = hn::Or(hn::And(b, hn::Set(di, 15)), HighBit16(qh, j));
      VI q1 = hn::Or(hn::ShiftRight<4>(b), HighBit16(qh, j + 16));
      if constexpr (kMin) {
        StoreMulAdd(q0, d, m, y + j);
        StoreMulAdd(q1, d, m, y + j + 16);
      } else {
        StoreMul(hn::Sub(q0, hn::Set(di, 16)), d, y + j);
        StoreMul(hn::Sub(q1, hn::Set(di, 16)), d, y + j + 16);
      }
    }
  }
}

void DecodeIQ4_NL(const BlockIQ4_NL* x, size_t nb, float* y) {
  const size_t N = hn::Lanes(DF());
  const DI di;
  for (size_t i = 0; i < nb; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d);
    for (size_t j = 0; j < 16; j += N) {
      const VI b = Bytes(x[i].qs + j);
      StoreIQ4(hn::And(b, hn::Set(di, 15)), d, y + j);
      StoreIQ4(hn::ShiftRight<4>(b), d, y + j + 16);
    }
  }
}

void DecodeQ2_K(const BlockQ2_K* x, size_t nb, float* y) {
  const size_t N = hn::Lanes(DF());
  const DI di;
  for (size_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d), dmin = F16ToF32(x[i].dmin);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* q = x[i].qs + 32 * h;
      for (int s = 0; s < 4; ++s) {
        for (int half = 0; half < 2; ++half, y += 16) {
          const uint8_t sc = x[i].scales[8 * h + 2 * s + half];
          const float dl = d * static_cast<float>(sc & 0xF);
          const float ml = dmin * static_cast<float>(sc >> 4);
          for (size_t l = 0; l < 16; l += N) {
            const VI c = hn::And(hn::ShiftRightSame(Bytes(q + 16 * half + l), 2 * s), hn::Set(di, 3));
            StoreMulSub(c, dl, ml, y + l);
          }
        }
      }
    }
  }
}

void DecodeQ3_K(const BlockQ3_K* x, size_t nb, float* y) {
  const size_t N = hn::Lanes(DF());
  const DI di;
  for (size_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d);
    int8_t sc[16];
    UnpackQ3KScales(x[i].scales, sc);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* q = x[i].qs + 32 * h;
      for (int s = 0; s < 4; ++s) {
        const VI m = hn::Set(di, 1 << (4 * h + s));
        for (int half = 0; half < 2; ++half, y += 16) {
          const float dl = d * static_cast<float>(sc[8 * h + 2 * s + half]);
          for (size_t l = 0; l < 16; l += N) {
            const size_t o = 16 * half + l;
            const VI lo = hn::And(hn::ShiftRightSame(Bytes(q + o), 2 * s), hn::Set(di, 3));
            const VI hb = hn::And(Bytes(x[i].hmask + o), m);
            const VI sub = hn::IfThenElseZero(hn::Eq(hb, hn::Zero(di)), hn::Set(di, 4));
            StoreMul(hn::Sub(lo, sub), dl, y + l);
          }
        }
      }
    }
  }
}

template <bool kQ5, class B>
void DecodeQ45_K(const B* x, size_t nb, float* y) {
  const size_t N = hn::Lanes(DF());
  const DI di;
  for (size_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d), dmin = F16ToF32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int c = 0; c < 4; ++c, q += 32, y += 64) {
      uint8_t sc, mn;
      UnpackScaleMinK4(2 * c, x[i].scales, &sc, &mn);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
      UnpackScaleMinK4(2 * c + 1, x[i].scales, &sc, &mn);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(mn);
      for (size_t l = 0; l < 32; l += N) {
        const VI b = Bytes(q + l);
        VI lo = hn::And(b, hn::Set(di, 15));
        VI hi = hn::ShiftRight<4>(b);
        if constexpr (kQ5) {
          const VI h = Bytes(x[i].qh + l);
          lo = hn::Add(lo, hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(h, 2 * c), hn::Set(di, 1))));
          hi = hn::Add(hi, hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(h, 2 * c + 1), hn::Set(di, 1))));
        }
        StoreMulSub(lo, d1, m1, y + l);
        StoreMulSub(hi, d2, m2, y + 32 + l);
      }
    }
  }
}

void DecodeQ6_K(const BlockQ6_K* x, size_t nb, float* y) {
  const size_t N = hn::Lanes(DF());
  const DI di;
  const VI k15 = hn::Set(di, 15), k3 = hn::Set(di, 3), k32 = hn::Set(di, 32);
  for (size_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int h = 0; h < 2; ++h, y += 128, ql += 64, qh += 32, sc += 8) {
      for (size_t l = 0; l < 32; l += N) {
        const size_t is = l / 16;
        const VI a = Bytes(ql + l), b = Bytes(ql + 32 + l), hb = Bytes(qh + l);
        const VI q1 = hn::Sub(hn::Or(hn::And(a, k15), hn::ShiftLeft<4>(hn::And(hb, k3))), k32);
        const VI q2 = hn::Sub(hn::Or(hn::And(b, k15), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<2>(hb), k3))), k32);
        const VI q3 = hn::Sub(hn::Or(hn::ShiftRight<4>(a), hn::ShiftLeft<4>(hn::And(hn::ShiftRight<4>(hb), k3))), k32);
        const VI q4 = hn::Sub(hn::Or(hn::ShiftRight<4>(b), hn::ShiftLeft<4>(hn::ShiftRight<6>(hb))), k32);
        StoreMul(q1, d * static_cast<float>(sc[is]), y + l);
        StoreMul(q2, d * static_cast<float>(sc[is + 2]), y + 32 + l);
        StoreMul(q3, d * static_cast<float>(sc[is + 4]), y + 64 + l);
        StoreMul(q4, d * static_cast<float>(sc[is + 6]), y + 96 + l);
      }
    }
  }
}

void DecodeIQ4_XS(const BlockIQ4_XS* x, size_t nb, float* y) {
  const size_t N = hn::Lanes(DF());
  const DI di;
  for (size_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d);
    const uint8_t* qs = x[i].qs;
    for (int ib = 0; ib < 8; ++ib, y += 32, qs += 16) {
      const float dl = d * static_cast<float>(IQ4XSScale(x[i], ib) - 32);
      for (size_t j = 0; j < 16; j += N) {
        const VI b = Bytes(qs + j);
        StoreIQ4(hn::And(b, hn::Set(di, 15)), dl, y + j);
        StoreIQ4(hn::ShiftRight<4>(b), dl, y + j + 16);
      }
    }
  }
}

bool DequantBlocksImpl(uint32_t ggml_type, const uint8_t* src, size_t nb, float* y) {
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::kQ4_1: DecodeQ4_1(reinterpret_cast<const BlockQ4_1*>(src), nb, y); return true;
    case GgmlType::kQ5_0: DecodeQ5<false>(reinterpret_cast<const BlockQ5_0*>(src), nb, y); return true;
    case GgmlType::kQ5_1: DecodeQ5<true>(reinterpret_cast<const BlockQ5_1*>(src), nb, y); return true;
    case GgmlType::kIQ4_NL: DecodeIQ4_NL(reinterpret_cast<const BlockIQ4_NL*>(src), nb, y); return true;
    case GgmlType::kQ2_K: DecodeQ2_K(reinterpret_cast<const BlockQ2_K*>(src), nb, y); return true;
    case GgmlType::kQ3_K: DecodeQ3_K(reinterpret_cast<const BlockQ3_K*>(src), nb, y); return true;
    case GgmlType::kQ4_K: DecodeQ45_K<false>(reinterpret_cast<const BlockQ4_K*>(src), nb, y); return true;
    case GgmlType::kQ5_K: DecodeQ45_K<true>(reinterpret_cast<const BlockQ5_K*>(src), nb, y); return true;
    case GgmlType::kQ6_K: DecodeQ6_K(reinterpret_cast<const BlockQ6_K*>(src), nb, y); return true;
    case GgmlType::kIQ4_XS: DecodeIQ4_XS(reinterpret_cast<const BlockIQ4_XS*>(src), nb, y); return true;
    default: return false;
  }
}

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace kvtier::weights::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvtier::weights {

HWY_EXPORT(DequantBlocksImpl);
HWY_EXPORT(TargetNameImpl);

bool DequantBlocks(uint32_t ggml_type, const uint8_t* src, size_t nb, float* y) {
  return HWY_DYNAMIC_DISPATCH(DequantBlocksImpl)(ggml_type, src, nb, y);
}

bool WeightsForceSimdTarget(long long target_bit) {
  hwy::SetSupportedTargetsForTest(0);
  if (target_bit != 0) {
    if ((hwy::SupportedTargets() & target_bit) == 0) return false;
    hwy::SetSupportedTargetsForTest(target_bit);
  }
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());  // dispatch caches its choice
  return true;
}

std::vector<long long> WeightsAvailableSimdTargets() {
  std::vector<long long> out;
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) out.push_back(t);
  return out;
}

const char* WeightsSimdTargetName() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

}  // namespace kvtier::weights
#endif  // HWY_ONCE
