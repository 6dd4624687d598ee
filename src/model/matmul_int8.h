// Integer matrix products on quantized weights (internal to src/model): the activations are
// quantized once per call to int8 blocks of 32 values (scale amax / 127, codes round(x / d),
// ggml's q8_0 rule; for the 256-value super-block types the amax of 256 values, as q8_K) in
// the layout the weight type and the instruction set want, and each
// weight block is multiplied by its activation block with integer dot products (AVX-512 VNNI
// vpdpbusd, AVX2 vpmaddubsw), one float multiply-add per block pair. No f32 decode of weights.
//
// One `Int8Kernels` entry per (weight type, ISA), found once per call in a table; the scalar
// `_ref` entries (matmul_int8_ref.cc) define the results the SIMD ones must reproduce (the same
// activation codes, the same integer block sums; only the float summation order differs).
// Everything here is stateless and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/model.h"

namespace kvtier {
class ThreadPool;
}

namespace kvtier::model::int8 {

enum class Isa : int { kScalar = 0, kAvx2 = 1, kAvx512Vnni = 2 };

// The kernels of one weight type on one instruction set.
struct Int8Kernels {
  const char* name;  // e.g. "q8_0 avx512vnni"
  size_t tile_rows;  // R: weight rows per tile call
  size_t tile_tok;   // T: most tokens per tile call
  // Bytes of one token's quantized activations for K inputs (a multiple of 64).
  size_t (*act_bytes)(size_t K);
  // Quantizes one token: x [K] f32 -> act [act_bytes(K)] (64-byte aligned).
  void (*quantize)(const float* x, size_t K, uint8_t* act);
  // y[t * ldy + r] = sum_k W[r][k] * x_t[k] for r < nr <= R, t < nt <= T. rows: R row
  // pointers (rows past nr repeat a valid row); act: token t's activations at act + t * stride.
  void (*tile)(const uint8_t* const* rows, size_t nr, const uint8_t* act, size_t stride,
               size_t nt, size_t K, float* y, size_t ldy);
};

// The kernels for a ggml weight type on `isa`, or null (type or ISA without an int8 path).
const Int8Kernels* FindInt8Kernels(uint32_t ggml_type, Isa isa);

// The best ISA this CPU runs (cpuid / xgetbv, once).
Isa DetectIsa();

// The natural activation layout (scalar and AVX2 kernels), per token, K a multiple of 32:
//   codes [K] int8 | d [K / 32] f32 (amax / 127) | sums [K / 32] int32 (sum of the block's codes)
size_t NaturalActBytes(size_t K);
void QuantizeNatural(const float* x, size_t K, uint8_t* act);
inline const int8_t* ActCodes(const uint8_t* act) { return reinterpret_cast<const int8_t*>(act); }
inline const float* ActScales(const uint8_t* act, size_t K) {
  return reinterpret_cast<const float*>(act + K);
}
inline const int32_t* ActSums(const uint8_t* act, size_t K) {
  return reinterpret_cast<const int32_t*>(act + K + 4 * (K / 32));
}

// y [n_tok][w.n_out] = x [n_tok][w.n_in] times w's rows with kernels k (w checked by the
// caller: k's type, row_bytes, n_in a multiple of 32). Decode (n_tok <= 2 T): R-row groups
// over the pool; prefill: (64-token block, 16-row group) items. pool may be null.
void RunInt8(const Int8Kernels& k, const WeightMatrix& w, const float* x, size_t n_tok,
             float* y, ThreadPool* pool);

// The K-quant activation layout (256-value super-blocks), per token, K a multiple of 256: one
// scale per 256 values (ggml's q8_K rounding) stored per 32-value block in the natural
// layout, then what the VNNI K-quant kernels read:
//   natural [NaturalActBytes(K)] | dxv [K / 64][16] f32 (lane / 8 -> block) |
//   xs [K / 32] f32 (d * sum of the block's codes) | init6 [K / 4] int32 (-32 * each 4 codes)
size_t KActBytes(size_t K);
void QuantizeKAct(const float* x, size_t K, uint8_t* act);
inline const float* KActDxv(const uint8_t* act, size_t K) {
  return reinterpret_cast<const float*>(act + NaturalActBytes(K));
}
inline const float* KActXs(const uint8_t* act, size_t K) { return KActDxv(act, K) + K / 4; }
inline const int32_t* KActInit6(const uint8_t* act, size_t K) {
  return reinterpret_cast<const int32_t*>(KActXs(act, K) + K / 32);
}

// Per-ISA tables (null-terminated lookups by ggml type); defined in the per-ISA files.
const Int8Kernels* Int8KernelsRef(uint32_t ggml_type);
const Int8Kernels* Int8KernelsAvx2(uint32_t ggml_type);
const Int8Kernels* Int8KernelsAvx512(uint32_t ggml_type);
const Int8Kernels* Int8KernelsRefKQuant(uint32_t ggml_type);     // matmul_kquant_ref.cc
const Int8Kernels* Int8KernelsAvx512KQuant(uint32_t ggml_type);  // matmul_kquant_avx512.cc
const Int8Kernels* Int8KernelsAvx2KQuant(uint32_t ggml_type);    // matmul_kquant_avx2.cc
const Int8Kernels* Int8KernelsAvx512Q23(uint32_t ggml_type);     // matmul_kquant23_avx512.cc
const Int8Kernels* Int8KernelsAvx512IQ4XS();                      // matmul_iq4xs_avx512.cc

}  // namespace kvtier::model::int8
