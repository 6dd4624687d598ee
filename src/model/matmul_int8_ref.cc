// Scalar `_ref` int8 kernels (see matmul_int8.h): the natural activation layout's quantizer and
// per-type block dot products in plain C++. They define what the SIMD kernels compute: the
// same codes (nearest-even rounding of x * (127 / amax) in f32), the same exact integer sum per
// block, scaled by d_w * d_x in f32 and summed over blocks in f32. Stateless; thread-safe.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "base/half.h"
#include "kvtier/gguf.h"
#include "model/matmul_int8.h"
#include "quant/format_traits.h"
#include "weights/blocks.h"

namespace kvtier::model::int8 {

size_t NaturalActBytes(size_t K) { return (K + 8 * (K / 32) + 63) / 64 * 64; }

void QuantizeNatural(const float* x, size_t K, uint8_t* act) {
  auto* codes = reinterpret_cast<int8_t*>(act);
  auto* d = reinterpret_cast<float*>(act + K);
  auto* sums = reinterpret_cast<int32_t*>(act + K + 4 * (K / 32));
  for (size_t b = 0; b < K / 32; ++b) {
    float amax = 0.0f;
    for (size_t i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * b + i]));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    int32_t s = 0;
    for (size_t i = 0; i < 32; ++i) {
      const auto q = static_cast<int32_t>(std::nearbyint(x[32 * b + i] * id));
      codes[32 * b + i] = static_cast<int8_t>(q);
      s += q;
    }
    d[b] = amax / 127.0f;
    sums[b] = s;
  }
}

namespace {

uint16_t Load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// Weight value i (0..31) of a block as a signed integer, and the block's f32 scale.
struct RefQ8_0 {
  static constexpr size_t kBytes = Q8_0Traits::kBlockBytes;
  static constexpr bool kHasMin = false;
  static float Scale(const uint8_t* b) { return F16ToF32(Load16(b + Q8_0Traits::kScaleOffset)); }
  static int32_t Code(const uint8_t* b, size_t i) {
    return static_cast<int8_t>(b[Q8_0Traits::kCodesOffset + i]);
  }
};
struct RefQ4_0 {
  static constexpr size_t kBytes = Q4_0Traits::kBlockBytes;
  static constexpr bool kHasMin = false;
  static float Scale(const uint8_t* b) { return F16ToF32(Load16(b + Q4_0Traits::kScaleOffset)); }
  static int32_t Code(const uint8_t* b, size_t i) {  // value i: low nibble of byte i, i+16 high
    const uint8_t v = b[Q4_0Traits::kCodesOffset + (i & 15)];
    return static_cast<int32_t>(i < 16 ? v & 15 : v >> 4) - Q4_0Traits::kZeroPoint;
  }
};

// The weights module's 32-value types (weights/blocks.h): codes as integers, x = d * code
// (+ m for q4_1 / q5_1).
template <class B, int kOff, bool kMin, bool kHigh, bool kTable>
struct RefNib {
  static constexpr size_t kBytes = sizeof(B);
  static constexpr bool kHasMin = kMin;
  static float Scale(const uint8_t* b) { return F16ToF32(Load16(b + offsetof(B, d))); }
  static float Min(const uint8_t* b) {
    if constexpr (kMin) {
      return F16ToF32(Load16(b + offsetof(B, m)));
    } else {
      return 0.0f;
    }
  }
  static int32_t Code(const uint8_t* b, size_t i) {
    const uint8_t v = b[offsetof(B, qs) + (i & 15)];
    int32_t q = i < 16 ? v & 15 : v >> 4;
    if constexpr (kHigh) {
      uint32_t qh;
      std::memcpy(&qh, b + offsetof(B, qh), 4);
      q |= static_cast<int32_t>((qh >> i) & 1) << 4;
    }
    if constexpr (kTable) q = weights::kIq4NlValues[q];
    return q - kOff;
  }
};
using RefQ4_1 = RefNib<weights::BlockQ4_1, 0, true, false, false>;
using RefQ5_0 = RefNib<weights::BlockQ5_0, 16, false, true, false>;
using RefQ5_1 = RefNib<weights::BlockQ5_1, 0, true, true, false>;
using RefIQ4_NL = RefNib<weights::BlockIQ4_NL, 0, false, false, true>;

template <class W>
void TileRef(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride, size_t nt,
             size_t K, float* y, size_t ldy) {
  for (size_t t = 0; t < nt; ++t) {
    const uint8_t* a = act + t * stride;
    const int8_t* q = ActCodes(a);
    const float* dx = ActScales(a, K);
    const int32_t* sums = ActSums(a, K);
    for (size_t r = 0; r < nr; ++r) {
      float acc = 0.0f;
      for (size_t b = 0; b < K / 32; ++b) {
        const uint8_t* blk = rows[r] + b * W::kBytes;
        int32_t s = 0;
        for (size_t i = 0; i < 32; ++i) s += W::Code(blk, i) * q[32 * b + i];
        acc += static_cast<float>(s) * (W::Scale(blk) * dx[b]);
        if constexpr (W::kHasMin) acc += W::Min(blk) * (dx[b] * static_cast<float>(sums[b]));
      }
      y[t * ldy + r] = acc;
    }
  }
}

constexpr Int8Kernels kRefQ8_0 = {"q8_0 int8 scalar", 4, 4, NaturalActBytes, QuantizeNatural,
                                  TileRef<RefQ8_0>};
constexpr Int8Kernels kRefQ4_0 = {"q4_0 int8 scalar", 4, 4, NaturalActBytes, QuantizeNatural,
                                  TileRef<RefQ4_0>};
constexpr Int8Kernels kRefQ4_1 = {"q4_1 int8 scalar", 4, 4, NaturalActBytes, QuantizeNatural,
                                  TileRef<RefQ4_1>};
constexpr Int8Kernels kRefQ5_0 = {"q5_0 int8 scalar", 4, 4, NaturalActBytes, QuantizeNatural,
                                  TileRef<RefQ5_0>};
constexpr Int8Kernels kRefQ5_1 = {"q5_1 int8 scalar", 4, 4, NaturalActBytes, QuantizeNatural,
                                  TileRef<RefQ5_1>};
constexpr Int8Kernels kRefIQ4_NL = {"iq4_nl int8 scalar", 4, 4, NaturalActBytes,
                                    QuantizeNatural, TileRef<RefIQ4_NL>};

}  // namespace

const Int8Kernels* Int8KernelsRef(uint32_t ggml_type) {
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::kQ8_0: return &kRefQ8_0;
    case GgmlType::kQ4_0: return &kRefQ4_0;
    case GgmlType::kQ4_1: return &kRefQ4_1;
    case GgmlType::kQ5_0: return &kRefQ5_0;
    case GgmlType::kQ5_1: return &kRefQ5_1;
    case GgmlType::kIQ4_NL: return &kRefIQ4_NL;
    default: return nullptr;
  }
}

}  // namespace kvtier::model::int8
