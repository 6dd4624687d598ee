// Test-only helpers for src/prefix: sequences whose K/V at position p is a pure function of
// tokens[0..p] (as a model's would be), and bitwise comparison of cached rows.
#pragma once

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "base/test_random.h"
#include "gtest/gtest.h"
#include "kv/kv_test_util.h"
#include "kvtier/block_key.h"
#include "kvtier/kv_io.h"
#include "kvtier/prefix_cache.h"
#include "kvtier/sequence_cache.h"

namespace kvtier::testing {

inline const ModelFingerprint kModelA{0x1111, 0x2222};
inline const ModelFingerprint kModelB{0x3333, 0x4444};

// K/V of `tokens` into `seq` (appended after what it holds, which must be tokens[0, size)):
// position p gets f32 values seeded by a hash of tokens[0..p].
inline void AppendTokens(SequenceCache& seq, std::span<const int32_t> tokens) {
  const KvShape& sh = seq.pool()->shape();
  const uint32_t first = seq.size();
  const size_t per_token = static_cast<size_t>(sh.n_kv_heads) * sh.head_dim;
  for (uint32_t p = first; p < tokens.size(); ++p) {
    const BlockKey h = ChainBlockKey(BlockKey{}, tokens.first(p + 1));
    for (uint32_t l = 0; l < sh.n_layers; ++l) {
      const std::vector<uint8_t> k = RandomValues(DType::kF32, per_token, h.lo + l, 1.5f, 0.2f);
      const std::vector<uint8_t> v = RandomValues(DType::kF32, per_token, h.hi + l, 0.8f, -0.1f);
      Status s = seq.Append(l, DType::kF32, k.data(), v.data(), 1);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
  }
}

inline SequenceCache SeqOf(const std::shared_ptr<BlockPool>& pool,
                           std::span<const int32_t> tokens) {
  SequenceCache s(pool);
  AppendTokens(s, tokens);
  return s;
}

// Encoded rows of tokens [0, n) of every layer, K then V.
inline std::vector<uint8_t> Encoded(const SequenceCache& s, uint32_t n) {
  const KvBlockLayout& l = s.pool()->layout();
  std::vector<uint8_t> out;
  std::vector<uint8_t> k(n * l.k_token_stride), v(n * l.v_token_stride);
  for (uint32_t layer = 0; layer < l.shape.n_layers; ++layer) {
    Status st = s.ReadEncoded(layer, 0, n, k.data(), v.data());
    EXPECT_TRUE(st.ok()) << st.ToString();
    out.insert(out.end(), k.begin(), k.end());
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// What a fetch of tokens[0, n) into `fetched` must hold for an entry computed in `computed`
// and stored in `stored` (each change of pool is one conversion, as the cache does it).
inline std::vector<uint8_t> Expected(const std::shared_ptr<BlockPool>& computed,
                                     const std::shared_ptr<BlockPool>& stored,
                                     const std::shared_ptr<BlockPool>& fetched,
                                     std::span<const int32_t> tokens, uint32_t n) {
  SequenceCache ref = SeqOf(computed, tokens.first(n));
  for (const auto& next : {stored, fetched}) {
    if (ref.pool() == next) continue;
    Result<SequenceCache> c = ConvertSequence(ref, next);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (!c.ok()) return {};
    ref = std::move(*c);
  }
  return Encoded(ref, n);
}

inline std::vector<int32_t> Range(int32_t from, int32_t n) {
  std::vector<int32_t> t(n);
  for (int32_t i = 0; i < n; ++i) t[i] = from + i;
  return t;
}

inline std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A lower tier that keeps only state snapshots, by position (a later one at the same
// position replaces the earlier); FindState: the longest above min_position and at or
// before both the limit and the token count (each call's limits kept in `asked`). Blocks:
// none kept, none found. Thread-safe (lock mu to read `kept` and `asked`).
class StateOnlyTier : public LowerTier {
 public:
  void Spill(const EvictedBlock&) override {}
  std::vector<TierNamespace> Namespaces(const ModelFingerprint&) override { return {}; }
  std::vector<TierBlock> FindChain(const TierNamespace&, std::span<const int32_t>) override {
    return {};
  }
  Status Load(const TierNamespace&, const BlockKey&, BlockPool&, BlockId) override {
    return Status::NotFound("none");
  }
  void SpillState(const ModelFingerprint&, const BlockKey&,
                  std::shared_ptr<const StateSnapshot> s) override {
    std::lock_guard<std::mutex> lock(mu);
    kept[s->position] = std::move(s);
  }
  std::shared_ptr<const StateSnapshot> FindState(const ModelFingerprint&,
                                                 std::span<const int32_t> tokens,
                                                 uint32_t min_position,
                                                 uint32_t max_position) override {
    std::lock_guard<std::mutex> lock(mu);
    asked.emplace_back(min_position, max_position);
    for (auto it = kept.rbegin(); it != kept.rend(); ++it) {
      if (it->first <= min_position) break;
      if (it->first <= max_position && it->first <= tokens.size()) return it->second;
    }
    return nullptr;
  }

  std::mutex mu;
  std::map<uint32_t, std::shared_ptr<const StateSnapshot>> kept;  // by position
  std::vector<std::pair<uint32_t, uint32_t>> asked;  // FindState's (min, max) positions
};

}  // namespace kvtier::testing
