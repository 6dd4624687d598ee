// Token-grouped K (chan<bits>g<G>) in the paged cache: appends in any pieces give the bytes of
// one append (the exact tail), reads decode what QuantizeChanGroups stored, forks, trims,
// conversions, blobs and copies keep every group decodable, and bad pools say why.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kv/kv_test_util.h"
#include "kvtier/kv_io.h"
#include "kvtier/quant_chan.h"

namespace kvtier {
namespace {

using testing::MakePool;

constexpr KvShape kShape{2, 2, 64};

std::vector<float> Keys(uint32_t n, uint32_t seed) {
  std::vector<float> x(size_t{n} * kShape.n_kv_heads * kShape.head_dim);
  uint32_t s = seed * 2654435761u + 1;
  for (size_t i = 0; i < x.size(); ++i) {
    s = s * 1664525u + 1013904223u;
    const float noise = static_cast<float>(s >> 8) / 16777216.0f - 0.5f;
    x[i] = static_cast<float>(i % kShape.head_dim % 7) - 3.0f + noise;  // channel offsets
  }
  return x;
}

// K and V of every layer of tokens [0, n), decoded.
std::vector<float> DenseK(const SequenceCache& s, uint32_t layer) {
  std::vector<float> k(size_t{s.size()} * kShape.n_kv_heads * kShape.head_dim), v(k.size());
  const Status st = s.ReadDense(layer, 0, s.size(), DType::kF32, k.data(), v.data());
  EXPECT_TRUE(st.ok()) << st.ToString();
  return k;
}

std::vector<uint8_t> KRegion(const SequenceCache& s, uint32_t layer, size_t block) {
  const KvBlockLayout& l = s.pool()->layout();
  const uint8_t* p = s.pool()->block_data(s.block_ids()[block]) + l.k_offset(layer);
  return {p, p + l.block_tokens * l.k_token_stride};
}

void Append(SequenceCache& s, const std::vector<float>& x, uint32_t first, uint32_t n) {
  const size_t hd = size_t{kShape.n_kv_heads} * kShape.head_dim;
  for (uint32_t l = 0; l < kShape.n_layers; ++l) {
    const Status st = s.Append(l, DType::kF32, x.data() + first * hd, x.data() + first * hd, n);
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
}

TEST(GroupedK, PiecewiseAppendsEqualOneAppendBitForBit) {
  for (const Format& f : {Format::Chan(4, 32), Format::Chan(3, 64), Format::Chan(2, 32),
                          Format::ChanMix(3, 64), Format::ChanMix(2, 32)}) {
    const uint32_t bt = 2 * f.group;
    auto pool = MakePool(kShape, f, Format::Q8_0(), bt, 64ull << 20);
    const uint32_t n = 3 * bt + 7;
    const std::vector<float> x = Keys(n, f.bits);
    SequenceCache one(pool), pieces(pool);
    Append(one, x, 0, n);
    for (uint32_t t = 0, step = 1; t < n; t += step, step = step % 5 + 1) {
      Append(pieces, x, t, std::min(step, n - t));
    }
    ASSERT_EQ(one.size(), pieces.size());
    for (uint32_t l = 0; l < kShape.n_layers; ++l) {
      for (size_t b = 0; b < one.n_blocks(); ++b) {
        EXPECT_EQ(KRegion(one, l, b), KRegion(pieces, l, b)) << f.name() << " block " << b;
      }
      // What the cache decodes is what QuantizeChanGroups of all the keys decodes to.
      std::vector<uint8_t> rows(size_t{4} * bt * pool->layout().k_token_stride);
      ASSERT_TRUE(QuantizeChanGroups(f, DType::kF32, x.data(), n, kShape.n_kv_heads,
                                     kShape.head_dim, rows.data()).ok());
      std::vector<float> want(x.size());
      ASSERT_TRUE(DequantizeChanRows(f, rows.data(), 0, n, kShape.n_kv_heads, kShape.head_dim,
                                     DType::kF32, want.data()).ok());
      EXPECT_EQ(DenseK(pieces, l), want) << f.name();
    }
  }
}

TEST(GroupedK, ForksTrimsAndCopiesKeepGroupsDecodable) {
  const Format f = Format::Chan(4, 32);
  auto pool = MakePool(kShape, f, Format::F16(), 32, 64ull << 20);
  const std::vector<float> x = Keys(100, 9);
  SequenceCache a(pool);
  Append(a, x, 0, 40);  // a partial second group
  SequenceCache b = a.Fork();
  Append(b, x, 40, 30);  // copy-on-write of the shared partial block, exact tail
  Append(a, x, 40, 30);
  for (uint32_t l = 0; l < kShape.n_layers; ++l) EXPECT_EQ(DenseK(a, l), DenseK(b, l));
  // Trim back into the whole first group: the rest of it still decodes, and appends after
  // requantize it from its decoded keys (within the 4-bit step of the original).
  ASSERT_TRUE(a.Trim(50).ok());
  ASSERT_EQ(a.size(), 20u);
  const std::vector<float> before = DenseK(a, 0);
  const std::vector<float> bk = DenseK(b, 0);
  EXPECT_EQ(before, std::vector<float>(bk.begin(), bk.begin() + static_cast<std::ptrdiff_t>(before.size())));
  Append(a, x, 20, 30);
  const std::vector<float> after = DenseK(a, 0);
  for (size_t i = 0; i < after.size(); ++i) ASSERT_NEAR(after[i], x[i], 0.2) << i;
}

TEST(GroupedK, BlobsConversionsAndEncodedCopiesRoundTrip) {
  const Format f = Format::Chan(4, 64);
  auto pool = MakePool(kShape, f, Format::Rot(4, 0), 64, 64ull << 20);
  const std::vector<float> x = Keys(150, 3);
  SequenceCache s(pool);
  Append(s, x, 0, 150);  // 2 whole groups and a partial one
  Result<std::vector<uint8_t>> blob = SerializeSequence(s, {});
  ASSERT_TRUE(blob.ok()) << blob.status().ToString();
  EXPECT_EQ(blob->size(), SerializedSequenceBytes(s, false));
  Result<DeserializedSequence> back = DeserializeSequence(*blob, pool);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  for (uint32_t l = 0; l < kShape.n_layers; ++l) {
    EXPECT_EQ(DenseK(back->sequence, l), DenseK(s, l));
    for (size_t b = 0; b < s.n_blocks(); ++b) EXPECT_EQ(KRegion(back->sequence, l, b), KRegion(s, l, b));
  }
  // To f16 and back: the same keys (f16 keeps the decoded values, requantizing them gives
  // the same codes and parameters).
  auto f16 = MakePool(kShape, Format::F16(), Format::F16(), 16, 64ull << 20);
  Result<SequenceCache> dense = ConvertSequence(s, f16);
  ASSERT_TRUE(dense.ok()) << dense.status().ToString();
  auto pool2 = MakePool(kShape, f, Format::Rot(4, 0), 64, 64ull << 20);
  Result<SequenceCache> again = ConvertSequence(*dense, pool2);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  for (uint32_t l = 0; l < kShape.n_layers; ++l) {
    const std::vector<float> k0 = DenseK(s, l), k1 = DenseK(*again, l);
    ASSERT_EQ(k0.size(), k1.size());
    for (size_t i = 0; i < k0.size(); ++i) ASSERT_NEAR(k1[i], k0[i], 0.02) << i;
  }
  // Same formats, another pool: encoded rows, bit for bit.
  Result<SequenceCache> copy = ConvertSequence(s, pool2);
  ASSERT_TRUE(copy.ok());
  for (uint32_t l = 0; l < kShape.n_layers; ++l) EXPECT_EQ(DenseK(*copy, l), DenseK(s, l));
}

TEST(GroupedK, PoolsSayWhatIsWrong) {
  Result<KvBlockLayout> a = KvBlockLayout::Make(kShape, Format::Chan(4, 64), Format::F16(), 32);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("multiple of 64"), std::string::npos) << a.status().message();
  Result<KvBlockLayout> b = KvBlockLayout::Make(kShape, Format::F16(), Format::Chan(4, 32), 32);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("K format"), std::string::npos) << b.status().message();
  EXPECT_TRUE(KvBlockLayout::Make(kShape, Format::Chan(4, 64), Format::Rot(4, 0), 128).ok());
}

}  // namespace
}  // namespace kvtier
