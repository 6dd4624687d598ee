// Prefill (many tokens) int8 matrix products on quantized weights, AVX-512 VNNI (internal to
// src/model). The int8 tiles of matmul_int8.h decode 4 weight rows per 4 tokens and pay an
// int->float conversion and two float ops per 64 products; here each work item unpacks a
// group of 64 weight rows ONCE into a thread-local, L2-resident "interleaved" form and runs
// every token of the call against it:
//   codes [K / 4][16 rows][4] uint8 (u = w + z, z the type's zero point; per 16-row group),
//   d     [K / SB][16] f32 (the sub-block's scale, d_w x the sub-scale, as the refs form it),
//   m     [K / SB][16] f32 (types with a min: the signed min term's factor, else absent)
// with SB = 16 or 32 (the type's sub-block). One vpdpbusd (16 rows x 4 values, the token's 4
// activation codes broadcast) per 64 products; per sub-block and token one int->float
// conversion and two float ops for 16 rows. The activations are the same int8 codes as the
// int8 kernels' (QuantizeNatural / QuantizeKAct), with per sub-block
//   dx f32, nzx int32 = -z * sum(codes), xs f32 = dx * sum(codes),
// so each sub-block's integer sum is exactly the scalar `_ref` kernels' (matmul_int8_ref.cc,
// matmul_kquant_ref.cc), scaled in f32 in the same association; only the order of the f32
// sums differs. The weights are read from the mapped file (no copy survives the call).
// Stateless apart from thread_local scratch; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvtier/model.h"

namespace kvtier {
class ThreadPool;
}

namespace kvtier::model::int8 {

// True when RunGemm handles this weight type (and this CPU runs AVX-512 VNNI).
bool GemmSupports(uint32_t ggml_type);

// y [n_tok][w.n_out] = x [n_tok][w.n_in] times w's rows (w checked by the caller; n_in a
// multiple of the type's block). pool may be null.
void RunGemm(const WeightMatrix& w, const float* x, size_t n_tok, float* y, ThreadPool* pool);

// f16 / bf16 weights (matmul_gemm_float_avx512.cc): true when RunGemmFloat handles this
// type and row length on this CPU (f16: AVX-512; bf16: AVX512_BF16, n_in even).
bool GemmFloatSupports(uint32_t ggml_type, size_t n_in);
void RunGemmFloat(const WeightMatrix& w, const float* x, size_t n_tok, float* y,
                  ThreadPool* pool);

// The fewest tokens for which MatMul uses RunGemm / RunGemmFloat: below them the unpacking
// costs more than the old tiles lose (kvtier-bench model, 1 thread, CPU time, 2026-11-27:
// int8 at 16 tokens 0.80-0.88x the tiles, at 32 1.04-1.25x; f16 at 128 0.96x, at 256 1.10x;
// bf16 at 64 already 1.36x).
inline constexpr size_t kGemmMinTokens = 32;
inline constexpr size_t kGemmF16MinTokens = 192;

}  // namespace kvtier::model::int8
