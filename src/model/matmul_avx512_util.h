// Small AVX-512 helpers shared by the decode kernels of matmul_kquant23_avx512.cc and
// matmul_iq4xs_avx512.cc (internal to src/model). Every function carries the kernels' target
// attribute, so include this only from those files and call it only where DetectIsa() found
// AVX-512 VNNI. Stateless; thread-safe.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#define MM_VNNI \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512dq,avx512vnni")))
#define MM_VNNI_INL inline __attribute__((always_inline)) MM_VNNI

namespace kvtier::model::int8 {

// The lane sums of four int32 vectors, per 128-bit lane: lane j of the result holds
// [sum a0, sum a1, sum a2, sum a3] over a's 128-bit lane j (exact int32 adds).
MM_VNNI_INL __m512i LaneSums4(__m512i a0, __m512i a1, __m512i a2, __m512i a3) {
  const __m512i t0 = _mm512_add_epi32(_mm512_unpacklo_epi32(a0, a1), _mm512_unpackhi_epi32(a0, a1));
  const __m512i t1 = _mm512_add_epi32(_mm512_unpacklo_epi32(a2, a3), _mm512_unpackhi_epi32(a2, a3));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
}

// [sum a0, sum a1, sum a2, sum a3] over all 16 lanes of each (exact int32 adds).
MM_VNNI_INL __m128i RowSums4(__m512i a0, __m512i a1, __m512i a2, __m512i a3) {
  const __m512i u = LaneSums4(a0, a1, a2, a3);
  const __m256i v = _mm256_add_epi32(_mm512_castsi512_si256(u), _mm512_extracti64x4_epi64(u, 1));
  return _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}

// The f16 at offset off of four rows' super-block i (bytes per super-block) as 4 f32.
MM_VNNI_INL __m128 Halves4(const uint8_t* const* rows, size_t i, size_t bytes, size_t off) {
  uint16_t h[4];
  for (size_t r = 0; r < 4; ++r) std::memcpy(&h[r], rows[r] + i * bytes + off, 2);
  uint64_t v;
  std::memcpy(&v, h, 8);
  return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(v)));
}

MM_VNNI_INL float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

}  // namespace kvtier::model::int8

#endif
