// Scalar `_ref` int8 kernels of the K-quants (Q4_K, Q6_K; see matmul_int8.h) and the K-quant
// activation layout's quantizer. Block layouts are ggml's (256 values per super-block):
//   Q4_K: d f16 | dmin f16 | scales [12] (8 6-bit scales, 8 6-bit mins) | qs [128]; values
//         64k .. 64k+31 are the low nibbles of qs[32k ..], 64k+32 .. the high nibbles;
//         x = d * sc_j * q - dmin * m_j for sub-block j of 32.
//   Q6_K: ql [128] | qh [64] | scales [16] int8 | d f16; x = d * sc_(v / 16) * (q - 32) with q
//         the 4 low bits from ql and 2 high bits from qh (kquant_layout.h).
// Activations are int8 with one scale per 256 values (q8_K's rounding), stored per 32-value
// block, so a sub-block's product is d_w-terms x d_x x (exact integer sum). Stateless; thread-safe.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/half.h"
#include "kvtier/gguf.h"
#include "model/kquant_layout.h"
#include "model/matmul_int8.h"

namespace kvtier::model::int8 {

size_t KActBytes(size_t K) {  // natural | dxv (K bytes) | xs (K / 8 bytes) | init6 (K bytes)
  return (NaturalActBytes(K) + K + K / 8 + K + 63) / 64 * 64;
}

// One scale per 256 values (ggml's q8_K activations for K-quant and iq4_xs weights, so
// that kvtier rounds the activations as llama.cpp does: perplexity parity), stored per
// 32-value block as the natural layout wants.
void QuantizeKAct(const float* x, size_t K, uint8_t* act) {
  auto* codes = reinterpret_cast<int8_t*>(act);
  auto* dd = reinterpret_cast<float*>(act + K);
  auto* ss = reinterpret_cast<int32_t*>(act + K + 4 * (K / 32));
  for (size_t i = 0; i < K / kQK; ++i) {
    float amax = 0.0f;
    for (size_t v = 0; v < kQK; ++v) amax = std::max(amax, std::fabs(x[kQK * i + v]));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    for (size_t b = 8 * i; b < 8 * i + 8; ++b) {
      int32_t sum = 0;
      for (size_t l = 0; l < 32; ++l) {
        const auto q = static_cast<int32_t>(std::nearbyint(x[32 * b + l] * id));
        codes[32 * b + l] = static_cast<int8_t>(q);
        sum += q;
      }
      dd[b] = amax / 127.0f;
      ss[b] = sum;
    }
  }
  const int8_t* c = ActCodes(act);
  const float* d = ActScales(act, K);
  const int32_t* sums = ActSums(act, K);
  auto* dxv = const_cast<float*>(KActDxv(act, K));
  auto* xs = const_cast<float*>(KActXs(act, K));
  auto* init6 = const_cast<int32_t*>(KActInit6(act, K));
  for (size_t s = 0; s < K / 64; ++s) {
    for (size_t lane = 0; lane < 16; ++lane) dxv[16 * s + lane] = d[2 * s + lane / 8];
  }
  for (size_t b = 0; b < K / 32; ++b) xs[b] = d[b] * static_cast<float>(sums[b]);
  for (size_t i = 0; i < K / 4; ++i) {
    init6[i] = -32 * (c[4 * i] + c[4 * i + 1] + c[4 * i + 2] + c[4 * i + 3]);
  }
}

namespace {

uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Q4_K (kFive false) and Q5_K (the 5th bit of value 64 c + 32 h + l: bit 2 c + h of qh[l]).
template <bool kFive>
void TileQ45_KRef(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride,
                  size_t nt, size_t K, float* y, size_t ldy) {
  constexpr size_t kBytes = kFive ? kQ5KBytes : kQ4KBytes;
  constexpr size_t kD = kFive ? kQ5KD : kQ4KD, kDmin = kFive ? kQ5KDmin : kQ4KDmin;
  constexpr size_t kScales = kFive ? kQ5KScales : kQ4KScales, kQs = kFive ? kQ5KQs : kQ4KQs;
  for (size_t t = 0; t < nt; ++t) {
    const uint8_t* a = act + t * stride;
    const int8_t* c = ActCodes(a);
    const float* dx = ActScales(a, K);
    const float* xs = KActXs(a, K);
    for (size_t r = 0; r < nr; ++r) {
      float acc = 0.0f, macc = 0.0f;
      for (size_t i = 0; i < K / kQK; ++i) {
        const uint8_t* blk = rows[r] + i * kBytes;
        const float d = F16ToF32(Load16(blk + kD)), dmin = F16ToF32(Load16(blk + kDmin));
        const uint8_t* qs = blk + kQs;
        for (size_t j = 0; j < 8; ++j) {
          uint8_t sc, m;
          Q4KScaleMin(blk + kScales, j, &sc, &m);
          int32_t dot = 0;
          for (size_t l = 0; l < 32; ++l) {
            const uint8_t byte = qs[32 * (j / 2) + l];
            int32_t q = (j & 1) ? byte >> 4 : byte & 15;
            if constexpr (kFive) q |= ((blk[kQ5KQh + l] >> j) & 1) << 4;
            dot += q * c[kQK * i + 32 * j + l];
          }
          const size_t b = 8 * i + j;
          acc += static_cast<float>(dot) * (d * sc * dx[b]);
          macc += dmin * m * xs[b];
        }
      }
      y[t * ldy + r] = acc - macc;
    }
  }
}

void TileQ6_KRef(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride,
                 size_t nt, size_t K, float* y, size_t ldy) {
  for (size_t t = 0; t < nt; ++t) {
    const uint8_t* a = act + t * stride;
    const int8_t* c = ActCodes(a);
    const float* dx = ActScales(a, K);
    for (size_t r = 0; r < nr; ++r) {
      float acc = 0.0f;
      for (size_t i = 0; i < K / kQK; ++i) {
        const uint8_t* blk = rows[r] + i * kQ6KBytes;
        const float d = F16ToF32(Load16(blk + kQ6KD));
        const auto* sc = reinterpret_cast<const int8_t*>(blk + kQ6KScales);
        for (size_t g = 0; g < 16; ++g) {
          int32_t dot = 0;
          for (size_t v = 16 * g; v < 16 * g + 16; ++v) {
            dot += (Q6KCode(blk, v) - 32) * c[kQK * i + v];
          }
          acc += static_cast<float>(dot) * (d * sc[g] * dx[(kQK * i + 16 * g) / 32]);
        }
      }
      y[t * ldy + r] = acc;
    }
  }
}

void TileIQ4_XSRef(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride,
                   size_t nt, size_t K, float* y, size_t ldy) {
  for (size_t t = 0; t < nt; ++t) {
    const uint8_t* a = act + t * stride;
    const int8_t* c = ActCodes(a);
    const float* dx = ActScales(a, K);
    for (size_t r = 0; r < nr; ++r) {
      float acc = 0.0f;
      for (size_t i = 0; i < K / kQK; ++i) {
        weights::BlockIQ4_XS blk;
        std::memcpy(&blk, rows[r] + i * sizeof(blk), sizeof(blk));
        const float d = F16ToF32(blk.d);
        for (int ib = 0; ib < 8; ++ib) {
          int32_t dot = 0;
          for (size_t l = 0; l < 32; ++l) {
            const uint8_t byte = blk.qs[16 * ib + (l & 15)];
            dot += weights::kIq4NlValues[l < 16 ? byte & 15 : byte >> 4] * c[kQK * i + 32 * ib + l];
          }
          const float sc = d * static_cast<float>(weights::IQ4XSScale(blk, ib) - 32);
          acc += static_cast<float>(dot) * (sc * dx[8 * i + ib]);
        }
      }
      y[t * ldy + r] = acc;
    }
  }
}

// Q2_K (kThree false: x = d (sc & 15) q - dmin (sc >> 4)) and Q3_K (x = d sc (q + 4 h - 4)),
// both with a scale per 16 values.
template <bool kThree>
void TileQ23_KRef(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride,
                  size_t nt, size_t K, float* y, size_t ldy) {
  constexpr size_t kBytes = kThree ? kQ3KBytes : kQ2KBytes;
  for (size_t t = 0; t < nt; ++t) {
    const uint8_t* a = act + t * stride;
    const int8_t* c = ActCodes(a);
    const float* dx = ActScales(a, K);
    for (size_t r = 0; r < nr; ++r) {
      float acc = 0.0f;
      for (size_t i = 0; i < K / kQK; ++i) {
        const uint8_t* blk = rows[r] + i * kBytes;
        int8_t sc3[16];
        if constexpr (kThree) weights::UnpackQ3KScales(blk + kQ3KScales, sc3);
        const float d = F16ToF32(Load16(blk + (kThree ? kQ3KD : kQ2KD)));
        const float dmin = kThree ? 0.0f : F16ToF32(Load16(blk + kQ2KDmin));
        for (size_t g = 0; g < 16; ++g) {
          int32_t dot = 0, csum = 0;
          for (size_t v = 16 * g; v < 16 * g + 16; ++v) {
            int32_t q = Q2Code(blk + (kThree ? kQ3KQs : kQ2KQs), v);
            if constexpr (kThree) q += 4 * Q3HighBit(blk + kQ3KHmask, v) - 4;
            dot += q * c[kQK * i + v];
            csum += c[kQK * i + v];
          }
          const float dxb = dx[(kQK * i + 16 * g) / 32];
          if constexpr (kThree) {
            acc += static_cast<float>(dot) * (d * sc3[g] * dxb);
          } else {
            const uint8_t sc = blk[kQ2KScales + g];
            acc += static_cast<float>(dot) * (d * (sc & 15) * dxb);
            acc -= dmin * (sc >> 4) * (dxb * static_cast<float>(csum));
          }
        }
      }
      y[t * ldy + r] = acc;
    }
  }
}

constexpr Int8Kernels kRefQ2_K = {"q2_K int8 scalar", 4, 4, KActBytes, QuantizeKAct,
                                  TileQ23_KRef<false>};
constexpr Int8Kernels kRefQ3_K = {"q3_K int8 scalar", 4, 4, KActBytes, QuantizeKAct,
                                  TileQ23_KRef<true>};
constexpr Int8Kernels kRefQ4_K = {"q4_K int8 scalar", 4, 4, KActBytes, QuantizeKAct,
                                  TileQ45_KRef<false>};
constexpr Int8Kernels kRefQ5_K = {"q5_K int8 scalar", 4, 4, KActBytes, QuantizeKAct,
                                  TileQ45_KRef<true>};
constexpr Int8Kernels kRefQ6_K = {"q6_K int8 scalar", 4, 4, KActBytes, QuantizeKAct,
                                  TileQ6_KRef};
constexpr Int8Kernels kRefIQ4_XS = {"iq4_xs int8 scalar", 4, 4, KActBytes, QuantizeKAct,
                                    TileIQ4_XSRef};

}  // namespace

const Int8Kernels* Int8KernelsRefKQuant(uint32_t ggml_type) {
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::kQ2_K: return &kRefQ2_K;
    case GgmlType::kQ3_K: return &kRefQ3_K;
    case GgmlType::kQ4_K: return &kRefQ4_K;
    case GgmlType::kQ5_K: return &kRefQ5_K;
    case GgmlType::kQ6_K: return &kRefQ6_K;
    case GgmlType::kIQ4_XS: return &kRefIQ4_XS;
    default: return nullptr;
  }
}

}  // namespace kvtier::model::int8
