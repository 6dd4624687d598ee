// Scalar `_ref` int8 kernels (see matmul_int8.h): the natural activation layout's quantizer and
// per-type block dot products in plain C++. They define what the SIMD kernels compute: the
// same codes (nearest-even rounding of x * (127 / amax) in f32), the same exact integer sum per
// block, scaled by d_w * d_x in f32 and summed over blocks in f32. Stateless; thread-safe.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/half.h"
#include "kvtier/gguf.h"
#include "model/matmul_int8.h"
#include "quant/format_traits.h"

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
  static float Scale(const uint8_t* b) { return F16ToF32(Load16(b + Q8_0Traits::kScaleOffset)); }
  static int32_t Code(const uint8_t* b, size_t i) {
    return static_cast<int8_t>(b[Q8_0Traits::kCodesOffset + i]);
  }
};
struct RefQ4_0 {
  static constexpr size_t kBytes = Q4_0Traits::kBlockBytes;
  static float Scale(const uint8_t* b) { return F16ToF32(Load16(b + Q4_0Traits::kScaleOffset)); }
  static int32_t Code(const uint8_t* b, size_t i) {  // value i: low nibble of byte i, i+16 high
    const uint8_t v = b[Q4_0Traits::kCodesOffset + (i & 15)];
    return static_cast<int32_t>(i < 16 ? v & 15 : v >> 4) - Q4_0Traits::kZeroPoint;
  }
};

template <class W>
void TileRef(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride, size_t nt,
             size_t K, float* y, size_t ldy) {
  for (size_t t = 0; t < nt; ++t) {
    const uint8_t* a = act + t * stride;
    const int8_t* q = ActCodes(a);
    const float* dx = ActScales(a, K);
    for (size_t r = 0; r < nr; ++r) {
      float acc = 0.0f;
      for (size_t b = 0; b < K / 32; ++b) {
        const uint8_t* blk = rows[r] + b * W::kBytes;
        int32_t s = 0;
        for (size_t i = 0; i < 32; ++i) s += W::Code(blk, i) * q[32 * b + i];
        acc += static_cast<float>(s) * (W::Scale(blk) * dx[b]);
      }
      y[t * ldy + r] = acc;
    }
  }
}

constexpr Int8Kernels kRefQ8_0 = {"q8_0 int8 scalar", 4, 4, NaturalActBytes, QuantizeNatural,
                                  TileRef<RefQ8_0>};
constexpr Int8Kernels kRefQ4_0 = {"q4_0 int8 scalar", 4, 4, NaturalActBytes, QuantizeNatural,
                                  TileRef<RefQ4_0>};

}  // namespace

const Int8Kernels* Int8KernelsRef(uint32_t ggml_type) {
  switch (static_cast<GgmlType>(ggml_type)) {
    case GgmlType::kQ8_0: return &kRefQ8_0;
    case GgmlType::kQ4_0: return &kRefQ4_0;
    default: return nullptr;
  }
}

}  // namespace kvtier::model::int8
