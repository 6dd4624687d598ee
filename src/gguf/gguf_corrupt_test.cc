// GGUF reader on corrupt images: one hand-made fault per field (the message names the file,
// the field, its byte offset and expected vs got), every truncation of a small file, byte
// flips at every offset, and truncations / flips of llama.cpp's vocab files. Never a crash
// (CI runs this under ASan + UBSan).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>

#include "kvtier/gguf.h"

namespace kvtier {
namespace {

// Raw little-endian image builder for hand-made faults.
struct Img {
  std::vector<uint8_t> b;
  Img& U8(uint8_t v) { return Raw(&v, 1); }
  Img& U32(uint32_t v) { return Raw(&v, 4); }
  Img& U64(uint64_t v) { return Raw(&v, 8); }
  Img& F32(float v) { return Raw(&v, 4); }
  Img& Str(std::string_view s) {
    U64(s.size());
    return Raw(s.data(), s.size());
  }
  Img& Raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b.insert(b.end(), c, c + n);
    return *this;
  }
  Img& Header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    Raw("GGUF", 4);
    U32(version);
    U64(n_tensors);
    return U64(n_kv);
  }
  Img& KvU32(std::string_view key, uint32_t v) {
    Str(key);
    U32(4);
    return U32(v);
  }
  Img& Tensor(std::string_view name, std::initializer_list<uint64_t> dims, uint32_t type,
              uint64_t offset) {
    Str(name);
    U32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) U64(d);
    U32(type);
    return U64(offset);
  }
  Img& PadTo(size_t align) {
    b.resize((b.size() + align - 1) / align * align, 0);
    return *this;
  }
  Img& Zeros(size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
  size_t size() const { return b.size(); }
};

Status Parse(const std::vector<uint8_t>& b) {
  return GgufFile::FromMemory(b, "bad.gguf").status();
}

void ExpectError(const Img& img, StatusCode code, std::initializer_list<std::string> parts) {
  const Status s = Parse(img.b);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), code) << s.ToString();
  EXPECT_EQ(s.message().rfind("bad.gguf: ", 0), 0u) << s.message();
  for (const std::string& p : parts) {
    EXPECT_NE(s.message().find(p), std::string::npos) << "want '" << p << "' in: " << s.message();
  }
}

TEST(GgufCorrupt, Header) {
  ExpectError(Img{}, StatusCode::kCorruption, {"magic at byte 0: needs 4 bytes"});
  ExpectError(Img{}.Raw("GGML", 4).U32(3).U64(0).U64(0), StatusCode::kCorruption,
              {"magic at byte 0: expected \"GGUF\", got \"GGML\""});
  ExpectError(Img{}.Header(0, 0, 4), StatusCode::kInvalidArgument,
              {"version at byte 4: expected 3 (or 2), got 4"});
  ExpectError(Img{}.Header(0, 0, 0x03000000u), StatusCode::kInvalidArgument, {"big-endian"});
  ExpectError(Img{}.Raw("GGUF", 4).U32(3).U64(0), StatusCode::kCorruption,
              {"metadata count at byte 16: needs 8 bytes"});
  ExpectError(Img{}.Header(0, 1ull << 60), StatusCode::kCorruption,
              {"metadata count at byte 16", "1152921504606846976 key-value pairs"});
  ExpectError(Img{}.Header(~0ull, 0), StatusCode::kCorruption, {"tensor count at byte 8"});
  // Version 2 has the same layout.
  EXPECT_TRUE(Parse(Img{}.Header(0, 0, 2).b).ok());
  EXPECT_TRUE(Parse(Img{}.Header(0, 1).KvU32("k", 5).b).ok());
}

TEST(GgufCorrupt, Metadata) {
  ExpectError(Img{}.Header(0, 1).U64(100).Raw("k", 1).U32(4).U32(0), StatusCode::kCorruption,
              {"key 0 at byte 24: string length 100 runs past the end"});
  ExpectError(Img{}.Header(0, 1).Str("").U32(4).U32(0), StatusCode::kCorruption,
              {"key 0 at byte 24: empty key"});
  ExpectError(Img{}.Header(0, 1).Str("k").U32(13).U32(0), StatusCode::kCorruption,
              {"key 0 'k' type at byte 33: expected a value type 0..12, got 13"});
  ExpectError(Img{}.Header(0, 1).Str("k").U32(7).U8(2).Zeros(8), StatusCode::kCorruption,
              {"key 0 'k' value at byte 37: expected a bool 0 or 1, got 2"});
  ExpectError(Img{}.Header(0, 2).KvU32("k", 1).KvU32("k", 2), StatusCode::kCorruption,
              {"key 1 'k' at byte 41: duplicate key"});
  ExpectError(Img{}.Header(0, 1).Str("k").U32(8).U64(1000).Raw("abc", 3), StatusCode::kCorruption,
              {"key 0 'k' value at byte 37: string length 1000"});
  // Array: element count * element size must fit in what is left.
  ExpectError(Img{}.Header(0, 1).Str("k").U32(9).U32(6).U64(3).F32(1).F32(2),
              StatusCode::kCorruption,
              {"key 0 'k' value element count at byte 41: 3 items of float32 take at least 4 "
               "bytes each, the file has 8 bytes left"});
  ExpectError(Img{}.Header(0, 1).Str("k").U32(9).U32(8).U64(2).Str("a").U64(9).Raw("b", 1),
              StatusCode::kCorruption, {"key 0 'k' value item 1 at byte 58: string length 9"});
  ExpectError(Img{}.Header(0, 1).Str("k").U32(9).U32(99).U64(0), StatusCode::kCorruption,
              {"key 0 'k' value element type at byte 37: expected a value type 0..12, got 99"});
  // 2^24 array items in all at most: checked before anything is allocated for them.
  Img many;
  many.Header(0, 1).Str("k").U32(9).U32(0).U64((1u << 24) + 1).Zeros((1u << 24) + 1);
  ExpectError(many, StatusCode::kResourceExhausted,
              {"key 0 'k' value element count at byte 41: more than 16,777,216 metadata values"});
  // Nested arrays: fine up to the depth limit, an error past it, never a stack overflow.
  auto nested = [](int depth) {
    Img img;
    img.Header(0, 1).Str("k").U32(9);
    for (int i = 0; i < depth; ++i) img.U32(9).U64(1);
    return img.U32(4).U64(1).U32(7);
  };
  EXPECT_TRUE(Parse(nested(7).b).ok()) << Parse(nested(7).b).ToString();
  ExpectError(nested(8), StatusCode::kCorruption, {"nested deeper than 8"});
  ExpectError(nested(100000), StatusCode::kCorruption, {"nested deeper than 8"});
}

TEST(GgufCorrupt, Alignment) {
  ExpectError(Img{}.Header(0, 1).Str("general.alignment").U32(6).F32(32), StatusCode::kCorruption,
              {"key 'general.alignment' at byte 53: expected uint32, got float32"});
  ExpectError(Img{}.Header(0, 1).KvU32("general.alignment", 48), StatusCode::kCorruption,
              {"expected a power of two, got 48"});
  ExpectError(Img{}.Header(0, 1).KvU32("general.alignment", 0), StatusCode::kCorruption,
              {"expected a power of two, got 0"});
  Img ok;
  ok.Header(1, 1).KvU32("general.alignment", 8).Tensor("w", {2}, 0, 8).PadTo(8).Zeros(16);
  auto f = GgufFile::FromMemory(ok.b, "ok.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->alignment(), 8u);
  EXPECT_EQ((*f)->tensors()[0].data, ok.b.data() + ok.size() - 8);
}

// A file with one tensor "w" of `dims` and `type` at `offset`; `data` bytes of data.
Img OneTensor(std::initializer_list<uint64_t> dims, uint32_t type, uint64_t offset, size_t data) {
  Img img;
  img.Header(1, 0).Tensor("w", dims, type, offset).PadTo(32).Zeros(data);
  return img;
}

TEST(GgufCorrupt, TensorInfo) {
  EXPECT_TRUE(Parse(OneTensor({32, 2}, 8, 0, 68).b).ok());
  ExpectError(OneTensor({32, 2}, 99, 0, 68), StatusCode::kInvalidArgument,
              {"tensor 0 'w' type at byte 53: unsupported tensor type 99 in tensor w"});
  ExpectError(OneTensor({16, 2}, 8, 0, 68), StatusCode::kCorruption,
              {"tensor 0 'w' dim 0 at byte 37: expected a multiple of the q8_0 block size 32, "
               "got 16"});
  ExpectError(OneTensor({32, 0}, 8, 0, 68), StatusCode::kCorruption,
              {"tensor 0 'w' dim 1 at byte 45: expected 1..2^63-1, got 0"});
  ExpectError(OneTensor({1ull << 32, 1ull << 32}, 0, 0, 68), StatusCode::kCorruption,
              {"tensor 0 'w' dim 1 at byte 45: the product of the dimensions overflows"});
  ExpectError(OneTensor({32, 2}, 8, 16, 68), StatusCode::kCorruption,
              {"tensor 0 'w' offset at byte 57: expected a multiple of the alignment 32, got 16"});
  ExpectError(OneTensor({32, 2}, 8, 0, 67), StatusCode::kCorruption,
              {"tensor 0 'w' offset at byte 57: data [0, +68) runs past the end of the data "
               "section (67 bytes from byte 96)"});
  ExpectError(OneTensor({32, 2}, 8, ~0ull << 5, 68), StatusCode::kCorruption,
              {"tensor 0 'w' offset at byte 57", "runs past the end"});
  // K-quant / IQ4 tensors (issue 30): a row that is not whole super-blocks, a truncated tensor.
  EXPECT_TRUE(Parse(OneTensor({256, 2}, 12, 0, 288).b).ok());
  ExpectError(OneTensor({384, 2}, 12, 0, 288), StatusCode::kCorruption,
              {"tensor 0 'w' dim 0 at byte 37: expected a multiple of the q4_K block size 256, "
               "got 384"});
  ExpectError(OneTensor({256, 2}, 12, 0, 287), StatusCode::kCorruption,
              {"tensor 0 'w' offset at byte 57: data [0, +288) runs past the end of the data "
               "section (287 bytes from byte 96)"});
  ExpectError(OneTensor({512, 3}, 23, 0, 815), StatusCode::kCorruption,
              {"tensor 0 'w' offset at byte 57: data [0, +816) runs past the end"});
  ExpectError(OneTensor({48, 1}, 20, 0, 36), StatusCode::kCorruption,
              {"tensor 0 'w' dim 0 at byte 37: expected a multiple of the iq4_nl block size 32, "
               "got 48"});
  Img five;
  five.Header(1, 0).Str("w").U32(5);
  for (int i = 0; i < 5; ++i) five.U64(1);
  five.U32(0).U64(0).PadTo(32).Zeros(4);
  ExpectError(five, StatusCode::kCorruption, {"tensor 0 'w' n_dims at byte 33: expected 1..4, got 5"});
  Img empty_name;
  empty_name.Header(1, 0).Tensor("", {1}, 0, 0).PadTo(32).Zeros(4);
  ExpectError(empty_name, StatusCode::kCorruption, {"tensor 0 name at byte 24: empty name"});
}

TEST(GgufCorrupt, TensorLayout) {
  Img dup;
  dup.Header(2, 0).Tensor("w", {8}, 0, 0).Tensor("w", {8}, 0, 32).PadTo(32).Zeros(64);
  ExpectError(dup, StatusCode::kCorruption, {"tensor 1 'w' name", "duplicate tensor name"});
  Img overlap;
  overlap.Header(2, 0).Tensor("a", {16}, 0, 0).Tensor("b", {8}, 0, 32).PadTo(32).Zeros(64);
  ExpectError(overlap, StatusCode::kCorruption,
              {"tensor 1 'b' offset", "data at 32 overlaps tensor 0 'a' [0, +64)"});
  Img same;
  same.Header(2, 0).Tensor("a", {8}, 0, 32).Tensor("b", {8}, 0, 32).PadTo(32).Zeros(64);
  ExpectError(same, StatusCode::kCorruption, {"overlaps"});
  Img adjacent;  // touching is fine, and order in the file need not follow the offsets
  adjacent.Header(2, 0).Tensor("a", {8}, 0, 32).Tensor("b", {8}, 0, 0).PadTo(32).Zeros(64);
  auto f = GgufFile::FromMemory(adjacent.b, "ok.gguf");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->tensors()[0].data - (*f)->tensors()[1].data, 32);
  // Names with control bytes are escaped in messages.
  Img odd;
  odd.Header(1, 0).Tensor(std::string_view("a\n\x01'", 4), {8}, 99, 0).PadTo(32).Zeros(32);
  ExpectError(odd, StatusCode::kInvalidArgument, {"tensor 0 'a\\x0a\\x01\\x27' type"});
}

// A small valid file: a few keys (array, nested array), tensors of three types.
std::vector<uint8_t> SmallFile(size_t* data_end) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetUint32("llama.block_count", 2);
  w.SetStringArray("tokenizer.ggml.tokens", {"a", "bc", ""});
  w.SetValue("n", GgufArrayValue(GgufValueType::kArray,
                                 {GgufArrayValue(GgufValueType::kInt8,
                                                 {GgufIntValue(GgufValueType::kInt8, -1)})}));
  w.SetBool("b", true);
  std::vector<uint8_t> f32(4 * 3, 1), q8(34 * 2, 2), q4k(144, 3);
  EXPECT_TRUE(w.AddTensor("f", GgmlType::kF32, {3}, f32).ok());
  EXPECT_TRUE(w.AddTensor("q", GgmlType::kQ8_0, {32, 2}, q8).ok());
  EXPECT_TRUE(w.AddTensor("k", GgmlType::kQ4_K, {256}, q4k).ok());
  std::vector<uint8_t> img = w.Serialize();
  auto f = GgufFile::FromMemory(img, "small");
  EXPECT_TRUE(f.ok());
  const GgufTensor& last = (*f)->tensors().back();
  *data_end = static_cast<size_t>(last.data - img.data() + last.n_bytes);
  return img;
}

// Parses without crashing; when it succeeds every tensor's bytes are inside the image (read
// them all, so ASan sees any escape).
void ParseAndTouch(const std::vector<uint8_t>& b) {
  auto f = GgufFile::FromMemory(b, "x");
  if (!f.ok()) {
    EXPECT_FALSE(f.status().message().empty());
    return;
  }
  unsigned sum = 0;
  for (const GgufTensor& t : (*f)->tensors()) {
    ASSERT_GE(t.data, b.data());
    ASSERT_LE(t.data + t.n_bytes, b.data() + b.size());
    for (uint64_t i = 0; i < t.n_bytes; ++i) sum += t.data[i];
  }
  EXPECT_GE(sum, 0u);
}

TEST(GgufCorrupt, EveryTruncationOfASmallFile) {
  size_t data_end = 0;
  const std::vector<uint8_t> img = SmallFile(&data_end);
  ASSERT_GT(data_end, 100u);
  for (size_t n = 0; n < img.size(); ++n) {
    // A copy of exactly n bytes, so ASan catches any read past it.
    const std::vector<uint8_t> cut(img.begin(), img.begin() + static_cast<ptrdiff_t>(n));
    const Status s = Parse(cut);
    if (n < data_end) {
      EXPECT_FALSE(s.ok()) << "prefix of " << n << " bytes parsed";
    } else {
      EXPECT_TRUE(s.ok()) << n << ": " << s.ToString();  // only trailing padding cut
    }
  }
}

TEST(GgufCorrupt, ByteFlipsOfASmallFile) {
  size_t data_end = 0;
  const std::vector<uint8_t> img = SmallFile(&data_end);
  for (size_t i = 0; i < img.size(); ++i) {
    for (uint8_t mask : {0x01, 0x02, 0x10, 0x80, 0xff}) {
      std::vector<uint8_t> bad = img;
      bad[i] ^= mask;
      ParseAndTouch(bad);
    }
    for (uint8_t v : {0x00, 0x7f, 0xfe}) {
      std::vector<uint8_t> bad = img;
      bad[i] = v;
      ParseAndTouch(bad);
    }
  }
}

TEST(GgufCorrupt, VocabFilesTruncatedAndFlipped) {
  const auto dir = std::filesystem::path(KVTIER_SOURCE_DIR) / ".." / "shared" / "testdata" / "vocab";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no " << dir << " (shared test data)";
  for (const char* name : {"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf"}) {
    SCOPED_TRACE(name);
    std::ifstream in(dir / name, std::ios::binary);
    const std::vector<uint8_t> img(std::istreambuf_iterator<char>(in), {});
    ASSERT_GT(img.size(), 1000u);
    ASSERT_TRUE(Parse(img).ok());
    // Every offset in the header and the first keys, then spread over the file.
    std::vector<size_t> cuts;
    for (size_t n = 0; n < 400; ++n) cuts.push_back(n);
    for (size_t k = 1; k < 60; ++k) cuts.push_back(img.size() * k / 60);
    cuts.push_back(img.size() - 1);
    for (size_t n : cuts) {
      const std::vector<uint8_t> cut(img.begin(), img.begin() + static_cast<ptrdiff_t>(n));
      EXPECT_FALSE(Parse(cut).ok()) << n;
    }
    for (size_t k = 0; k < 120; ++k) {
      const size_t i = k < 60 ? k * 5 : (img.size() * (k - 60)) / 60 + 3;
      std::vector<uint8_t> bad = img;
      bad[i] ^= k % 2 == 0 ? 0xff : 0x40;
      ParseAndTouch(bad);
    }
  }
}

}  // namespace
}  // namespace kvtier
