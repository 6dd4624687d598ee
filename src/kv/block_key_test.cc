// Block keys: the bytes hashed are what block_key.h documents, keys are stable across runs and
// machines (golden values), and every input changes the key.
#include "kvtier/block_key.h"

#include <xxhash.h>

#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvtier {
namespace {

Hash128 Xxh(const std::vector<uint8_t>& b) {
  const XXH128_hash_t h = XXH3_128bits(b.data(), b.size());
  return {h.low64, h.high64};
}
void PutLe(std::vector<uint8_t>& b, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

TEST(BlockKey, ChainHashesParentThenLittleEndianTokens) {
  const BlockKey parent{0x0123456789abcdefull, 0xfedcba9876543210ull};
  const std::vector<int32_t> tokens = {7, 8191, 0, 123456, -1};
  std::vector<uint8_t> bytes;
  PutLe(bytes, parent.lo, 8);
  PutLe(bytes, parent.hi, 8);
  for (int32_t t : tokens) PutLe(bytes, static_cast<uint32_t>(t), 4);
  EXPECT_EQ(ChainBlockKey(parent, tokens), Xxh(bytes));
}

TEST(BlockKey, NamespaceHashesDocumentedFields) {
  const ModelFingerprint m{11, 22};
  const KvShape shape{28, 8, 128};
  const Format k = Format::Q8_0(), v = Format::Q4_0();
  std::vector<uint8_t> bytes;
  for (char c : std::string("kvtier-ns-v1")) bytes.push_back(static_cast<uint8_t>(c));
  PutLe(bytes, m.lo, 8);
  PutLe(bytes, m.hi, 8);
  for (uint32_t x : {28u, 8u, 128u, k.id(), v.id(), 32u}) PutLe(bytes, x, 4);
  EXPECT_EQ(NamespaceKey(m, shape, k, v, 32), Xxh(bytes));
}

// Keys are stored in files and shared between machines: these values must never change.
TEST(BlockKey, GoldenValuesNeverChange) {
  const BlockKey ns = NamespaceKey(ModelFingerprint{1, 2}, KvShape{8, 2, 128}, Format::F16(),
                                   Format::F16(), 32);
  EXPECT_EQ(ns.ToHex(), "551fa7e46dae4ce5f420110a51176ce2");
  const std::vector<int32_t> tokens = {1, 2, 3};
  EXPECT_EQ(ChainBlockKey(ns, tokens).ToHex(), "f07fbd8e9d2534803ed41844dddc16f7");
}

TEST(BlockKey, EveryInputChangesTheKey) {
  const ModelFingerprint m{5, 6};
  const KvShape shape{4, 2, 64};
  std::set<std::string> seen;
  auto add = [&](const BlockKey& k) { EXPECT_TRUE(seen.insert(k.ToHex()).second) << k.ToHex(); };
  add(NamespaceKey(m, shape, Format::F16(), Format::F16(), 32));
  add(NamespaceKey(ModelFingerprint{5, 7}, shape, Format::F16(), Format::F16(), 32));
  add(NamespaceKey(m, KvShape{4, 2, 128}, Format::F16(), Format::F16(), 32));
  add(NamespaceKey(m, shape, Format::Q8_0(), Format::F16(), 32));
  add(NamespaceKey(m, shape, Format::F16(), Format::Q4_0(), 32));
  add(NamespaceKey(m, shape, Format::F16(), Format::F16(), 16));
  const BlockKey root = NamespaceKey(m, shape, Format::F16(), Format::F16(), 32);
  const std::vector<int32_t> a = {1, 2, 3, 4}, b = {1, 2, 3, 5}, c = {1, 2, 3};
  add(ChainBlockKey(root, a));
  add(ChainBlockKey(root, b));
  add(ChainBlockKey(root, c));
  add(ChainBlockKey(ChainBlockKey(root, a), a));
  // The same inputs give the same key.
  EXPECT_EQ(ChainBlockKey(root, a), ChainBlockKey(root, a));
}

}  // namespace
}  // namespace kvtier
