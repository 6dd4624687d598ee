// Test-only helpers for src/kv: pools, random K/V chunks, and what the cache must return for
// them (the scalar reference's quantize -> dequantize of each row).
#pragma once

#include <cstring>
#include <memory>
#include <vector>

#include "base/test_random.h"
#include "gtest/gtest.h"
#include "kvtier/block_pool.h"
#include "kvtier/quant.h"
#include "kvtier/sequence_cache.h"

namespace kvtier::testing {

inline std::shared_ptr<BlockPool> MakePool(KvShape shape, Format k, Format v, uint32_t bt,
                                           uint64_t capacity,
                                           std::shared_ptr<MemoryBudget> budget = nullptr) {
  BlockPoolOptions o;
  o.shape = shape;
  o.k_format = k;
  o.v_format = v;
  o.block_tokens = bt;
  o.capacity_bytes = capacity;
  o.budget = std::move(budget);
  Result<std::shared_ptr<BlockPool>> p = BlockPool::Create(o);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : nullptr;
}

// Capacity for exactly n blocks of this layout.
inline uint64_t BlocksCapacity(KvShape shape, Format k, Format v, uint32_t bt, uint64_t n) {
  Result<KvBlockLayout> l = KvBlockLayout::Make(shape, k, v, bt);
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  return l.ok() ? n * l->block_stride : 0;
}

// A K/V chunk: [n_tokens, n_kv_heads, head_dim] values of `dtype` (bytes), random normal.
struct Chunk {
  DType dtype = DType::kF16;
  uint32_t n_tokens = 0;
  std::vector<uint8_t> k, v;
};

inline Chunk RandomChunk(const KvShape& s, uint32_t n_tokens, DType dtype, uint64_t seed) {
  const size_t n = static_cast<size_t>(n_tokens) * s.n_kv_heads * s.head_dim;
  return {dtype, n_tokens, RandomValues(dtype, n, seed, 1.5f, 0.25f),
          RandomValues(dtype, n, seed ^ 0x9e3779b97f4a7c15ull, 0.8f, -0.1f)};
}

// Appends `c` to every layer of `s`.
inline void AppendAll(SequenceCache& s, const Chunk& c) {
  for (uint32_t l = 0; l < s.pool()->shape().n_layers; ++l) {
    Status st = s.Append(l, c.dtype, c.k.data(), c.v.data(), c.n_tokens);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
}

// A new sequence of `pool` holding n random tokens of `dtype` (the chunk in *chunk if asked).
inline SequenceCache Filled(const std::shared_ptr<BlockPool>& pool, uint32_t n, uint64_t seed,
                            DType dtype = DType::kF16, Chunk* chunk = nullptr) {
  SequenceCache s(pool);
  Chunk c = RandomChunk(pool->shape(), n, dtype, seed);
  AppendAll(s, c);
  if (chunk) *chunk = std::move(c);
  return s;
}

// What a cache in `fmt` must give back for `src` (rows of head_dim values): f32 values.
inline std::vector<float> RoundTrip(const Format& fmt, DType dtype, const std::vector<uint8_t>& src,
                                    size_t head_dim) {
  const size_t rows = src.size() / DTypeSize(dtype) / head_dim;
  std::vector<uint8_t> q(rows * fmt.row_bytes(head_dim));
  std::vector<float> out(rows * head_dim);
  EXPECT_TRUE(QuantizeRowsRef(fmt, dtype, src.data(), rows, head_dim, q.data()).ok());
  EXPECT_TRUE(DequantizeRowsRef(fmt, q.data(), rows, head_dim, DType::kF32, out.data()).ok());
  return out;
}

// Dense f32 contents of tokens [first, first + n) of one layer.
struct Dense {
  std::vector<float> k, v;
};
inline Dense ReadLayer(const SequenceCache& s, uint32_t layer, uint32_t first, uint32_t n) {
  const KvShape& sh = s.pool()->shape();
  Dense d;
  d.k.resize(static_cast<size_t>(n) * sh.n_kv_heads * sh.head_dim);
  d.v.resize(d.k.size());
  Status st = s.ReadDense(layer, first, n, DType::kF32, d.k.data(), d.v.data());
  EXPECT_TRUE(st.ok()) << st.ToString();
  return d;
}

// Bitwise float vector equality (NaN-safe, -0 distinct).
inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

}  // namespace kvtier::testing
