// Scalar reference dequantizers (see dequant_ref.h). Written from the layouts of
// weights/blocks.h; the float expressions keep ggml's evaluation order so results match its
// dequantize_row_* bit for bit (e.g. q6_K is (d * sc) * q, q2_K is (d * sc) * q - dmin * m).
// Stateless; thread-safe.
#include "weights/dequant_ref.h"

#include <cstring>

#include "base/half.h"
#include "kvtier/gguf.h"

namespace kvtier::weights {

void DequantQ4_1Ref(const BlockQ4_1* x, size_t nb, float* y) {
  for (size_t i = 0; i < nb; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d), m = F16ToF32(x[i].m);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(x[i].qs[j] & 0xF) * d + m;
      y[j + 16] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

static inline uint32_t LoadQh(const uint8_t* qh) {
  uint32_t v;
  std::memcpy(&v, qh, 4);  // little-endian host (x86-64, aarch64)
  return v;
}

void DequantQ5_0Ref(const BlockQ5_0* x, size_t nb, float* y) {
  for (size_t i = 0; i < nb; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d);
    const uint32_t qh = LoadQh(x[i].qh);
    for (int j = 0; j < 16; ++j) {
      const int q0 = static_cast<int>((x[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - 16;
      const int q1 = static_cast<int>((x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
      y[j] = static_cast<float>(q0) * d;
      y[j + 16] = static_cast<float>(q1) * d;
    }
  }
}

void DequantQ5_1Ref(const BlockQ5_1* x, size_t nb, float* y) {
  for (size_t i = 0; i < nb; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d), m = F16ToF32(x[i].m);
    const uint32_t qh = LoadQh(x[i].qh);
    for (int j = 0; j < 16; ++j) {
      const int q0 = static_cast<int>((x[i].qs[j] & 0xF) | (((qh >> j) & 1) << 4));
      const int q1 = static_cast<int>((x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
      y[j] = static_cast<float>(q0) * d + m;
      y[j + 16] = static_cast<float>(q1) * d + m;
    }
  }
}

void DequantIQ4_NLRef(const BlockIQ4_NL* x, size_t nb, float* y) {
  for (size_t i = 0; i < nb; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(kIq4NlValues[x[i].qs[j] & 0xF]);
      y[j + 16] = d * static_cast<float>(kIq4NlValues[x[i].qs[j] >> 4]);
    }
  }
}

void DequantQ2_KRef(const BlockQ2_K* x, size_t nb, float* y) {
  for (size_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d), dmin = F16ToF32(x[i].dmin);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* q = x[i].qs + 32 * h;
      for (int s = 0; s < 4; ++s) {
        for (int half = 0; half < 2; ++half) {
          const uint8_t sc = x[i].scales[8 * h + 2 * s + half];
          const float dl = d * static_cast<float>(sc & 0xF);
          const float ml = dmin * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) {
            *y++ = dl * static_cast<float>((q[l + 16 * half] >> (2 * s)) & 3) - ml;
          }
        }
      }
    }
  }
}

void DequantQ3_KRef(const BlockQ3_K* x, size_t nb, float* y) {
  for (size_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d);
    int8_t sc[16];
    UnpackQ3KScales(x[i].scales, sc);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* q = x[i].qs + 32 * h;
      for (int s = 0; s < 4; ++s) {
        const uint8_t m = static_cast<uint8_t>(1u << (4 * h + s));
        for (int half = 0; half < 2; ++half) {
          const float dl = d * static_cast<float>(sc[8 * h + 2 * s + half]);
          for (int l = 16 * half; l < 16 * half + 16; ++l) {
            const int v = ((q[l] >> (2 * s)) & 3) - ((x[i].hmask[l] & m) ? 0 : 4);
            *y++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}

void DequantQ4_KRef(const BlockQ4_K* x, size_t nb, float* y) {
  for (size_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d), dmin = F16ToF32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int c = 0; c < 4; ++c, q += 32) {
      uint8_t sc, m;
      UnpackScaleMinK4(2 * c, x[i].scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      UnpackScaleMinK4(2 * c + 1, x[i].scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void DequantQ5_KRef(const BlockQ5_K* x, size_t nb, float* y) {
  for (size_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d), dmin = F16ToF32(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    for (int c = 0; c < 4; ++c, ql += 32) {
      uint8_t sc, m;
      UnpackScaleMinK4(2 * c, x[i].scales, &sc, &m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      UnpackScaleMinK4(2 * c + 1, x[i].scales, &sc, &m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      const uint8_t u1 = static_cast<uint8_t>(1u << (2 * c)), u2 = static_cast<uint8_t>(2u << (2 * c));
      for (int l = 0; l < 32; ++l) {
        *y++ = d1 * static_cast<float>((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
      }
    }
  }
}

void DequantQ6_KRef(const BlockQ6_K* x, size_t nb, float* y) {
  for (size_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int h = 0; h < 2; ++h, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

void DequantIQ4_XSRef(const BlockIQ4_XS* x, size_t nb, float* y) {
  for (size_t i = 0; i < nb; ++i) {
    const float d = F16ToF32(x[i].d);
    const uint8_t* qs = x[i].qs;
    for (int ib = 0; ib < 8; ++ib, y += 32, qs += 16) {
      const float dl = d * static_cast<float>(IQ4XSScale(x[i], ib) - 32);
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * static_cast<float>(kIq4NlValues[qs[j] & 0xF]);
        y[j + 16] = dl * static_cast<float>(kIq4NlValues[qs[j] >> 4]);
      }
    }
  }
}

bool DequantBlocksRef(uint32_t ggml_type, const uint8_t* src, size_t nb, float* y) {
  switch (static_cast<GgmlType>(ggml_type)) {
#define KVTIER_CASE(T, B, F) \
  case GgmlType::T: F(reinterpret_cast<const B*>(src), nb, y); return true;
    KVTIER_CASE(kQ4_1, BlockQ4_1, DequantQ4_1Ref)
    KVTIER_CASE(kQ5_0, BlockQ5_0, DequantQ5_0Ref)
    KVTIER_CASE(kQ5_1, BlockQ5_1, DequantQ5_1Ref)
    KVTIER_CASE(kIQ4_NL, BlockIQ4_NL, DequantIQ4_NLRef)
    KVTIER_CASE(kQ2_K, BlockQ2_K, DequantQ2_KRef)
    KVTIER_CASE(kQ3_K, BlockQ3_K, DequantQ3_KRef)
    KVTIER_CASE(kQ4_K, BlockQ4_K, DequantQ4_KRef)
    KVTIER_CASE(kQ5_K, BlockQ5_K, DequantQ5_KRef)
    KVTIER_CASE(kQ6_K, BlockQ6_K, DequantQ6_KRef)
    KVTIER_CASE(kIQ4_XS, BlockIQ4_XS, DequantIQ4_XSRef)
#undef KVTIER_CASE
    default: return false;
  }
}

}  // namespace kvtier::weights
