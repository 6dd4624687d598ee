// Sequence blobs (bit-exact round trips for every format, every kind of damage rejected with
// a named field) and conversion between pools.
#include "kvtier/kv_io.h"

#include <cstring>

#include "gtest/gtest.h"
#include "kv/kv_test_util.h"
#include "quant/test_formats.h"

namespace kvtier {
namespace {

using testing::Chunk;
using testing::MakePool;
using testing::RandomChunk;
using testing::ReadLayer;
using testing::RoundTrip;
using testing::SameBits;

const KvShape kShape{2, 2, 128};

using testing::Filled;

// Encoded rows of every layer, concatenated.
std::vector<uint8_t> Encoded(const SequenceCache& s) {
  const KvBlockLayout& l = s.pool()->layout();
  std::vector<uint8_t> out;
  for (uint32_t layer = 0; layer < l.shape.n_layers; ++layer) {
    std::vector<uint8_t> k(s.size() * l.k_token_stride), v(s.size() * l.v_token_stride);
    EXPECT_TRUE(s.ReadEncoded(layer, 0, s.size(), k.data(), v.data()).ok());
    out.insert(out.end(), k.begin(), k.end());
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

TEST(SequenceBlob, RoundTripsEveryFormatBitForBit) {
  uint64_t seed = 100;
  for (const Format& f : testing::AllFormats()) {
    SCOPED_TRACE(f.spec());
    const Format other = f.kind == FormatKind::kQ4_0 ? Format::BF16() : Format::Q4_0();
    auto pool = MakePool(kShape, f, other, 8, 1 << 22);
    const DType src = f.is_plain() ? f.scale_dtype : static_cast<DType>(seed % 3);
    SequenceCache s = Filled(pool, 13, ++seed, src);
    std::vector<int32_t> tokens(13);
    for (int i = 0; i < 13; ++i) tokens[static_cast<size_t>(i)] = 1000 * i - 7;
    Result<std::vector<uint8_t>> blob = SerializeSequence(s, tokens);
    ASSERT_TRUE(blob.ok()) << blob.status().ToString();
    EXPECT_EQ(blob->size(), SerializedSequenceBytes(s, true));
    // Read back into a pool with another block size: blobs do not depend on it.
    auto pool2 = MakePool(kShape, f, other, 5, 1 << 22);
    Result<DeserializedSequence> d = DeserializeSequence(*blob, pool2);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(d->tokens, tokens);
    EXPECT_EQ(d->sequence.size(), 13u);
    EXPECT_EQ(Encoded(d->sequence), Encoded(s));
  }
}

TEST(SequenceBlob, EmptyAndTokenlessSequences) {
  auto pool = MakePool(kShape, Format::Q8_0(), Format::Q8_0(), 8, 1 << 22);
  SequenceCache empty(pool);
  Result<std::vector<uint8_t>> blob = SerializeSequence(empty, {});
  ASSERT_TRUE(blob.ok());
  Result<DeserializedSequence> d = DeserializeSequence(*blob, pool);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->sequence.size(), 0u);
  SequenceCache s = Filled(pool, 3, 1);
  const int32_t two[] = {1, 2};
  Result<std::vector<uint8_t>> bad = SerializeSequence(s, two);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("2 tokens given for a sequence of 3"), std::string::npos);
}

// Every truncation and every single-bit flip is rejected (never a crash, never a sequence).
TEST(SequenceBlob, DamageIsAlwaysDetected) {
  auto pool = MakePool({1, 1, 32}, Format::Q4_0(), Format::BF16(), 4, 1 << 20);
  SequenceCache s = Filled(pool, 5, 2);
  const int32_t tokens[] = {5, 6, 7, 8, 9};
  Result<std::vector<uint8_t>> blob = SerializeSequence(s, tokens);
  ASSERT_TRUE(blob.ok());
  for (size_t len = 0; len < blob->size(); ++len) {
    Result<DeserializedSequence> d =
        DeserializeSequence(std::span<const uint8_t>(blob->data(), len), pool);
    ASSERT_FALSE(d.ok()) << len;
  }
  for (size_t byte = 0; byte < blob->size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> bad = *blob;
      bad[byte] ^= static_cast<uint8_t>(1u << bit);
      Result<DeserializedSequence> d = DeserializeSequence(bad, pool);
      ASSERT_FALSE(d.ok()) << "byte " << byte << " bit " << bit;
    }
  }
  EXPECT_EQ(pool->Stats().blocks_in_use, s.n_blocks());  // failed reads left nothing behind
}

TEST(SequenceBlob, ErrorsNameTheField) {
  auto pool = MakePool(kShape, Format::Q8_0(), Format::F16(), 8, 1 << 22);
  SequenceCache s = Filled(pool, 4, 3);
  Result<std::vector<uint8_t>> blob = SerializeSequence(s, {});
  ASSERT_TRUE(blob.ok());
  auto expect = [&](std::span<const uint8_t> b, std::shared_ptr<BlockPool> p, StatusCode code,
                    const std::string& says) {
    Result<DeserializedSequence> d = DeserializeSequence(b, std::move(p));
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), code) << d.status().ToString();
    EXPECT_NE(d.status().message().find(says), std::string::npos) << d.status().message();
  };
  expect(std::span(blob->data(), 10), pool, StatusCode::kCorruption, "10 bytes, shorter than");
  std::vector<uint8_t> b = *blob;
  b[0] = 'X';
  expect(b, pool, StatusCode::kInvalidArgument, "bad magic");
  b = *blob;
  b[8] = 2;
  expect(b, pool, StatusCode::kUnimplemented, "version 2 (offset 8)");
  b = *blob;
  b.pop_back();
  expect(std::span(b.data(), b.size()), pool, StatusCode::kCorruption, "payload_bytes (offset 48)");
  b = *blob;
  b[100] ^= 1;
  expect(b, pool, StatusCode::kCorruption, "checksum mismatch");
  auto other_fmt = MakePool(kShape, Format::Q4_0(), Format::F16(), 8, 1 << 22);
  expect(*blob, other_fmt, StatusCode::kInvalidArgument,
         "formats K q8_0 / V f16 differ from the pool's K q4_0 / V f16");
  auto other_shape = MakePool({2, 1, 128}, Format::Q8_0(), Format::F16(), 8, 1 << 22);
  expect(*blob, other_shape, StatusCode::kInvalidArgument, "KV shape 2 layers x 2 KV heads");
  auto tiny = MakePool(kShape, Format::Q8_0(), Format::F16(), 2,
                       testing::BlocksCapacity(kShape, Format::Q8_0(), Format::F16(), 2, 1));
  expect(*blob, tiny, StatusCode::kResourceExhausted, "needs 2 blocks");
  EXPECT_EQ(tiny->Stats().blocks_in_use, 0u);
}

TEST(ConvertSequence, SamePoolSameFormatsOtherFormats) {
  auto a = MakePool(kShape, Format::F16(), Format::BF16(), 8, 1 << 22);
  SequenceCache s = Filled(a, 19, 4, DType::kF32);

  Result<SequenceCache> same_pool = ConvertSequence(s, a, KvOwner::kPrefixCache);
  ASSERT_TRUE(same_pool.ok());
  EXPECT_EQ(same_pool->block_ids()[0], s.block_ids()[0]);
  EXPECT_EQ(same_pool->owner(), KvOwner::kPrefixCache);

  auto b = MakePool(kShape, Format::F16(), Format::BF16(), 4, 1 << 22);
  Result<SequenceCache> same_fmt = ConvertSequence(s, b);
  ASSERT_TRUE(same_fmt.ok());
  EXPECT_EQ(Encoded(*same_fmt), Encoded(s));
  EXPECT_GT(b->Stats().copied_bytes, 0u);

  for (const Format& f : {Format::Q4_0(), Format::Q8_0(), Format::Affine(4, 64, DType::kF16),
                          Format::F32()}) {
    SCOPED_TRACE(f.spec());
    auto c = MakePool(kShape, f, f, 8, 1 << 22);
    Result<SequenceCache> conv = ConvertSequence(s, c);
    ASSERT_TRUE(conv.ok()) << conv.status().ToString();
    for (uint32_t layer = 0; layer < 2; ++layer) {
      const testing::Dense src = ReadLayer(s, layer, 0, 19);
      const testing::Dense got = ReadLayer(*conv, layer, 0, 19);
      std::vector<uint8_t> kb(src.k.size() * 4), vb(src.v.size() * 4);
      std::memcpy(kb.data(), src.k.data(), kb.size());
      std::memcpy(vb.data(), src.v.data(), vb.size());
      EXPECT_TRUE(SameBits(got.k, RoundTrip(f, DType::kF32, kb, 128)));
      EXPECT_TRUE(SameBits(got.v, RoundTrip(f, DType::kF32, vb, 128)));
    }
  }
  auto wrong = MakePool({3, 2, 128}, Format::F16(), Format::F16(), 8, 1 << 22);
  Result<SequenceCache> bad = ConvertSequence(s, wrong);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("source KV shape"), std::string::npos);
  auto full = MakePool(kShape, Format::Q4_0(), Format::Q4_0(), 8,
                       testing::BlocksCapacity(kShape, Format::Q4_0(), Format::Q4_0(), 8, 2));
  bad = ConvertSequence(s, full);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(full->Stats().blocks_in_use, 0u);
}

}  // namespace
}  // namespace kvtier
