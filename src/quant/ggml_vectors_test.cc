// q8_0 / q4_0 against golden vectors produced by ggml's own reference code (see the header
// of testdata/ggml_q*.txt): our bytes equal ggml's, and ggml's bytes decode to ggml's floats.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kvtier/quant.h"
#include "quant/quant_ref.h"

namespace kvtier {
namespace {

struct Record {
  std::vector<float> in;     // [32]
  std::vector<uint8_t> q;    // one block
  std::vector<float> out;    // [32]
};

std::vector<Record> Load(const std::string& file, size_t block_bytes) {
  const std::string path = std::string(KVTIER_SOURCE_DIR) + "/src/quant/testdata/" + file;
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  std::vector<Record> recs;
  std::string line;
  Record cur;
  auto floats = [](std::istringstream& ss) {
    std::vector<float> v;
    std::string tok;
    while (ss >> tok) {
      const uint32_t u = static_cast<uint32_t>(std::stoul(tok, nullptr, 16));
      float x;
      std::memcpy(&x, &u, 4);
      v.push_back(x);
    }
    return v;
  };
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    std::string tag;
    ss >> tag;
    if (tag == "in") {
      cur = Record();
      cur.in = floats(ss);
    } else if (tag == "q") {
      std::string tok;
      while (ss >> tok) cur.q.push_back(static_cast<uint8_t>(std::stoul(tok, nullptr, 16)));
    } else if (tag == "out") {
      cur.out = floats(ss);
      EXPECT_EQ(cur.in.size(), 32u);
      EXPECT_EQ(cur.q.size(), block_bytes);
      EXPECT_EQ(cur.out.size(), 32u);
      recs.push_back(cur);
    } else {
      ADD_FAILURE() << "unexpected line in " << path << ": " << line;
    }
  }
  return recs;
}

void CheckFormat(const Format& f, const std::string& file, size_t block_bytes) {
  const std::vector<Record> recs = Load(file, block_bytes);
  ASSERT_GE(recs.size(), 40u);
  // All records as one row each of head_dim 32, through both the reference and dispatch.
  std::vector<float> in, expect_out;
  std::vector<uint8_t> expect_q;
  for (const Record& r : recs) {
    in.insert(in.end(), r.in.begin(), r.in.end());
    expect_q.insert(expect_q.end(), r.q.begin(), r.q.end());
    expect_out.insert(expect_out.end(), r.out.begin(), r.out.end());
  }
  const size_t rows = recs.size();
  for (bool simd : {false, true}) {
    std::vector<uint8_t> q(rows * block_bytes);
    std::vector<float> out(rows * 32);
    ASSERT_TRUE((simd ? QuantizeRows : QuantizeRowsRef)(f, DType::kF32, in.data(), rows, 32, q.data()).ok());
    ASSERT_TRUE((simd ? DequantizeRows : DequantizeRowsRef)(f, expect_q.data(), rows, 32, DType::kF32, out.data()).ok());
    for (size_t r = 0; r < rows; ++r) {
      for (size_t b = 0; b < block_bytes; ++b) {
        ASSERT_EQ(q[r * block_bytes + b], expect_q[r * block_bytes + b])
            << file << (simd ? " simd" : " ref") << " record " << r << " byte " << b;
      }
      for (size_t j = 0; j < 32; ++j) {
        uint32_t a, e;
        std::memcpy(&a, &out[r * 32 + j], 4);
        std::memcpy(&e, &expect_out[r * 32 + j], 4);
        ASSERT_EQ(a, e) << file << (simd ? " simd" : " ref") << " record " << r << " value " << j;
      }
    }
  }
}

TEST(GgmlVectors, Q8_0MatchesGgmlByteForByte) { CheckFormat(Format::Q8_0(), "ggml_q8_0.txt", 34); }
TEST(GgmlVectors, Q4_0MatchesGgmlByteForByte) { CheckFormat(Format::Q4_0(), "ggml_q4_0.txt", 18); }

}  // namespace
}  // namespace kvtier
