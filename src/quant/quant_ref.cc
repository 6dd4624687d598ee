// Scalar reference implementation of every row format. The SIMD kernels (quant_simd.cc)
// must produce exactly these bytes and floats. Pure functions; thread-safe.
#include "quant/quant_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>
#include <limits>

#include "quant/blocks.h"
#include "quant/rot.h"

namespace kvtier::ref {
namespace {

// Float to int32 with x86 semantics (cvtps2dq / cvttps2dq): NaN and out-of-range values give
// INT32_MIN. Shared by reference and SIMD code so both agree on every input.
int32_t ToInt32OrMin(float q) {
  if (!(q >= -2147483648.0f && q < 2147483648.0f)) return INT32_MIN;
  return static_cast<int32_t>(q);
}
int32_t RintToInt32(float v) { return ToInt32OrMin(std::rint(v)); }
int32_t TruncToInt32(float v) { return ToInt32OrMin(std::trunc(v)); }

}  // namespace

void QuantizeBlockQ8_0(const float* x, uint8_t* out) {
  BlockQ8_0 b;
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b.d = F32ToF16(d);
  // ggml: roundf(x * id). The clamp only changes non-finite input (NaN -> -127), which ggml
  // leaves undefined; the SIMD kernel does the same.
  for (int i = 0; i < 32; ++i) {
    const float v = x[i] * id;
    // roundf(v) == trunc(v + copysign(0.5, v)) exactly for |v| < 127.5 (see the SIMD kernel).
    b.qs[i] = static_cast<int8_t>(std::min(std::max(TruncToInt32(std::round(v)), -127), 127));
  }
  std::memcpy(out, &b, sizeof b);
}

void QuantizeBlockQ4_0(const float* x, uint8_t* out) {
  BlockQ4_0 b;
  float amax = 0.0f;
  float max = 0.0f;  // the signed value with the largest magnitude (first one wins)
  for (int i = 0; i < 32; ++i) {
    if (amax < std::fabs(x[i])) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b.d = F32ToF16(d);
  for (int j = 0; j < 16; ++j) {
    const float x0 = x[j] * id;
    const float x1 = x[j + 16] * id;
    // ggml: MIN(15, (int8_t)(x * id + 8.5f)); x * id + 8.5f >= 0 for finite input, so the
    // lower clamp only defines NaN (-> 0).
    const uint8_t q0 = static_cast<uint8_t>(TruncToInt32(std::fmin(std::fmax(x0 + 8.5f, 0.0f), 15.0f)));
    const uint8_t q1 = static_cast<uint8_t>(TruncToInt32(std::fmin(std::fmax(x1 + 8.5f, 0.0f), 15.0f)));
    b.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
  std::memcpy(out, &b, sizeof b);
}

void DequantizeBlockQ8_0(const uint8_t* in, float* y) {
  BlockQ8_0 b;
  std::memcpy(&b, in, sizeof b);
  const float d = F16ToF32(b.d);
  for (int i = 0; i < 32; ++i) y[i] = static_cast<float>(b.qs[i]) * d;
}

void DequantizeBlockQ4_0(const uint8_t* in, float* y) {
  BlockQ4_0 b;
  std::memcpy(&b, in, sizeof b);
  const float d = F16ToF32(b.d);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((b.qs[j] & 0x0f) - 8) * d;
    y[j + 16] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
  }
}

void QuantizeAffineGroup(const Format& f, DType src_dtype, const void* src, uint8_t* codes_out,
                         uint8_t* scales, uint8_t* biases, size_t g) {
  const int32_t n_bins = (1 << f.bits) - 1;
  uint8_t codes[128];
  float x[128];
  float w_min = std::numeric_limits<float>::infinity();
  float w_max = -w_min;
  for (size_t j = 0; j < f.group; ++j) {
    x[j] = LoadAs(src_dtype, src, j);
    w_max = std::max(w_max, x[j]);
    w_min = std::min(w_min, x[j]);
  }
  const AffineParams p = AffineParamsFromMinMax(w_min, w_max, f.bits);
  for (size_t j = 0; j < f.group; ++j) {
    // As MLX: clamp(rint((x - bias) / scale), 0, n_bins), with * inv_scale for / scale
    // (see AffineParams). Converted to int32 like x86's cvtps2dq: NaN (and the unreachable
    // |q| >= 2^31) become INT32_MIN, so code 0.
    const int32_t q = RintToInt32((x[j] - p.bias) * p.inv_scale);
    codes[j] = static_cast<uint8_t>(std::min(std::max(q, 0), n_bins));
  }
  PackCodes(codes, f.group, f.bits, codes_out);
  StoreAs(f.scale_dtype, scales, g, p.scale);
  StoreAs(f.scale_dtype, biases, g, p.bias);
}

void QuantizeBlockFrom(const Format& f, DType src_dtype, const void* src, uint8_t* block) {
  float x[32];
  for (size_t i = 0; i < 32; ++i) x[i] = LoadAs(src_dtype, src, i);
  if (f.kind == FormatKind::kQ8_0) QuantizeBlockQ8_0(x, block);
  else QuantizeBlockQ4_0(x, block);
}

namespace {

void QuantizeAffineRow(const Format& f, DType src_dtype, const void* src, size_t head_dim,
                       uint8_t* dst) {
  const AffineRowLayout l = MakeAffineLayout(f, head_dim);
  for (size_t g = 0; g < l.n_groups; ++g) {
    QuantizeAffineGroup(f, src_dtype,
                        static_cast<const uint8_t*>(src) + g * f.group * DTypeSize(src_dtype),
                        dst + g * l.group_code_bytes, dst + l.scales_off, dst + l.biases_off, g);
  }
}

void DequantizeAffineRow(const Format& f, const uint8_t* src, size_t head_dim, DType dst_dtype,
                         void* dst) {
  const AffineRowLayout l = MakeAffineLayout(f, head_dim);
  uint8_t codes[128];
  for (size_t g = 0; g < l.n_groups; ++g) {
    UnpackCodes(src + g * l.group_code_bytes, f.group, f.bits, codes);
    const float scale = LoadAs(f.scale_dtype, src + l.scales_off, g);
    const float bias = LoadAs(f.scale_dtype, src + l.biases_off, g);
    for (size_t j = 0; j < f.group; ++j) {
      StoreAs(dst_dtype, dst, g * f.group + j, std::fma(static_cast<float>(codes[j]), scale, bias));
    }
  }
}

}  // namespace

void QuantizeRotRow(const Format& f, DType src_dtype, const void* src, size_t head_dim,
                    uint8_t* dst) {
  std::vector<float> y(head_dim);
  for (size_t i = 0; i < head_dim; ++i) y[i] = LoadAs(src_dtype, src, i);
  RotateRef(y.data(), head_dim, f.seed, /*inverse=*/false);
  const size_t bb = RotBlockBytes(f.bits);
  for (size_t b = 0; b < head_dim / kRotBlockValues; ++b) {
    const float* yb = y.data() + b * kRotBlockValues;
    switch (f.bits) {
      case 2: QuantizeRotBlock<2>(yb, dst + b * bb); break;
      case 3: QuantizeRotBlock<3>(yb, dst + b * bb); break;
      default: QuantizeRotBlock<4>(yb, dst + b * bb); break;
    }
  }
}

void DequantizeRotRowStored(const Format& f, const uint8_t* src, size_t head_dim, float* y) {
  const size_t bb = RotBlockBytes(f.bits);
  for (size_t b = 0; b < head_dim / kRotBlockValues; ++b) {
    float* yb = y + b * kRotBlockValues;
    switch (f.bits) {
      case 2: DequantizeRotBlock<2>(src + b * bb, yb); break;
      case 3: DequantizeRotBlock<3>(src + b * bb, yb); break;
      default: DequantizeRotBlock<4>(src + b * bb, yb); break;
    }
  }
}

void QuantizeRow(const Format& f, DType src_dtype, const void* src, size_t head_dim,
                 uint8_t* dst) {
  switch (f.kind) {
    case FormatKind::kF32:
    case FormatKind::kF16:
    case FormatKind::kBF16: {
      const DType t = f.scale_dtype;  // the plain format's own dtype
      if (t == src_dtype) {
        std::memcpy(dst, src, head_dim * DTypeSize(t));
      } else {
        for (size_t i = 0; i < head_dim; ++i) StoreAs(t, dst, i, LoadAs(src_dtype, src, i));
      }
      return;
    }
    case FormatKind::kQ8_0:
    case FormatKind::kQ4_0: {
      const size_t block_bytes = f.kind == FormatKind::kQ8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
      for (size_t b = 0; b < head_dim / 32; ++b) {
        QuantizeBlockFrom(f, src_dtype, static_cast<const uint8_t*>(src) + b * 32 * DTypeSize(src_dtype),
                          dst + b * block_bytes);
      }
      return;
    }
    case FormatKind::kAffine:
      QuantizeAffineRow(f, src_dtype, src, head_dim, dst);
      return;
    case FormatKind::kRot:
      QuantizeRotRow(f, src_dtype, src, head_dim, dst);
      return;
    case FormatKind::kChan:  // token-grouped: chan_ref.cc (quant.cc refuses it here)
    case FormatKind::kChanMix:
      return;
  }
}

void DequantizeRow(const Format& f, const uint8_t* src, size_t head_dim, DType dst_dtype,
                   void* dst) {
  switch (f.kind) {
    case FormatKind::kF32:
    case FormatKind::kF16:
    case FormatKind::kBF16: {
      const DType t = f.scale_dtype;
      if (t == dst_dtype) {
        std::memcpy(dst, src, head_dim * DTypeSize(t));
      } else {
        for (size_t i = 0; i < head_dim; ++i) StoreAs(dst_dtype, dst, i, LoadAs(t, src, i));
      }
      return;
    }
    case FormatKind::kQ8_0:
    case FormatKind::kQ4_0: {
      float y[32];
      const bool q8 = f.kind == FormatKind::kQ8_0;
      const size_t block_bytes = q8 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
      for (size_t b = 0; b < head_dim / 32; ++b) {
        if (q8) DequantizeBlockQ8_0(src + b * block_bytes, y);
        else DequantizeBlockQ4_0(src + b * block_bytes, y);
        for (size_t i = 0; i < 32; ++i) StoreAs(dst_dtype, dst, b * 32 + i, y[i]);
      }
      return;
    }
    case FormatKind::kAffine:
      DequantizeAffineRow(f, src, head_dim, dst_dtype, dst);
      return;
    case FormatKind::kRot: {
      std::vector<float> y(head_dim);
      DequantizeRotRowStored(f, src, head_dim, y.data());
      RotateRef(y.data(), head_dim, f.seed, /*inverse=*/true);
      for (size_t i = 0; i < head_dim; ++i) StoreAs(dst_dtype, dst, i, y[i]);
      return;
    }
    case FormatKind::kChan:  // token-grouped: chan_ref.cc (quant.cc refuses it here)
    case FormatKind::kChanMix:
      return;
  }
}

}  // namespace kvtier::ref
