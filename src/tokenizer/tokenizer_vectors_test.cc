// llama.cpp's tokenizer conformance vectors (shared/testdata/vocab): every input must encode to
// exactly the expected ids (no BOS), and decode back to itself.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kvtier/gguf.h"
#include "kvtier/tokenizer.h"

namespace kvtier {
namespace {

std::string VocabDir() { return std::string(KVTIER_SOURCE_DIR) + "/../shared/testdata/vocab"; }

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

struct Vectors {
  std::vector<std::string> inputs;
  std::vector<std::vector<int32_t>> outputs;
};

// Inputs are separated by "\n__ggml_vocab_test__\n"; one output line per input.
bool LoadVectors(const std::string& base, Vectors* v) {
  std::string inp;
  std::string out;
  if (!ReadFile(base + ".inp", &inp) || !ReadFile(base + ".out", &out)) return false;
  const std::string sep = "\n__ggml_vocab_test__\n";
  size_t pos = 0;
  for (;;) {
    const size_t hit = inp.find(sep, pos);
    if (hit == std::string::npos) {
      v->inputs.push_back(inp.substr(pos));
      break;
    }
    v->inputs.push_back(inp.substr(pos, hit - pos));
    pos = hit + sep.size();
  }
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ids(line);
    std::vector<int32_t> row;
    for (int32_t id; ids >> id;) row.push_back(id);
    v->outputs.push_back(std::move(row));
  }
  // The file ends with a separator: the empty text after it has no output line.
  if (v->inputs.size() == v->outputs.size() + 1 && v->inputs.back().empty()) v->inputs.pop_back();
  return true;
}

std::string Show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    s += ' ';
    s += std::to_string(id);
  }
  return s;
}

class VocabVectors : public ::testing::TestWithParam<const char*> {};

TEST_P(VocabVectors, EncodeExactly) {
  const std::string base = VocabDir() + "/ggml-vocab-" + GetParam() + ".gguf";
  Vectors v;
  if (!LoadVectors(base, &v)) GTEST_SKIP() << "no test vectors at " << base;
  ASSERT_EQ(v.inputs.size(), v.outputs.size());
  auto file = GgufFile::Open(base);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  auto tok = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  size_t pass = 0;
  for (size_t i = 0; i < v.inputs.size(); ++i) {
    const auto ids = (*tok)->Encode(v.inputs[i], /*add_bos=*/false);
    if (ids == v.outputs[i]) {
      ++pass;
    } else {
      ADD_FAILURE() << GetParam() << " input " << i << " '" << v.inputs[i] << "'\n  want"
                    << Show(v.outputs[i]) << "\n  got " << Show(ids);
    }
    EXPECT_EQ((*tok)->Decode(ids), v.inputs[i]) << GetParam() << " input " << i;
  }
  std::printf("%s: %zu/%zu vectors pass\n", GetParam(), pass, v.inputs.size());
  EXPECT_EQ(pass, v.inputs.size());
}

INSTANTIATE_TEST_SUITE_P(Vocab, VocabVectors, ::testing::Values("gpt-2", "llama-spm"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

// The pre-tokenizer families on GPT-2's vocabulary (tokenizer.ggml.pre rewritten): expected ids
// from llama.cpp's llama_tokenize (no BOS) on a GGUF rewritten the same way.
struct FamilyCase {
  const char* pre;
  std::vector<std::vector<int32_t>> ids;
};

const char* const kFamilyInputs[] = {
    "Hello, y'all! I'VE got 1234567 apples'S\n\n  and\r\n  2024 tests  \n",
    " numbers 3.14159 and 1,000,000;\tTABS\t\there 'Re 'LL 'd",
    "x   \n\n\n   y   z!!!\n?? \xc2\xbfQu\xc3\xa9 tal? \xe6\x9d\xb1\xe4\xba\xac" "2020 "
    "\xd9\xa3\xd9\xa4\xd9\xa5 \xc2\xb2\xc2\xb3 \xe2\x85\xab",
};

const FamilyCase kFamilies[] = {
    {"default",
     {
         {15496, 11, 331, 6, 439, 0, 314, 6, 6089, 1392, 220, 10163, 29228, 22, 22514, 6, 50, 628,
          220, 290, 201, 198, 220, 220, 19004, 19, 5254, 220, 220, 198},
         {3146, 220, 18, 13, 23756, 3270, 290, 220, 16, 11, 830, 11, 830, 26, 197, 5603, 4462,
          197, 197, 1456, 220, 6, 3041, 220, 6, 3069, 220, 6, 67},
         {87, 220, 220, 220, 628, 198, 220, 220, 331, 220, 220, 1976, 10185, 198, 3548, 220, 126,
          123, 4507, 2634, 3305, 30, 10545, 251, 109, 12859, 105, 19004, 15, 220, 149, 96, 149,
          97, 149, 98, 220, 31185, 126, 111, 220, 158, 227, 104},
     }},
    {"gpt-2",
     {
         {15496, 11, 331, 6, 439, 0, 314, 6, 6089, 1392, 17031, 2231, 3134, 22514, 6, 50, 628,
          220, 290, 201, 198, 220, 48609, 5254, 220, 220, 198},
         {3146, 513, 13, 1415, 19707, 290, 352, 11, 830, 11, 830, 26, 197, 5603, 4462, 197, 197,
          1456, 705, 3041, 705, 3069, 705, 67},
         {87, 220, 220, 220, 628, 198, 220, 220, 331, 220, 220, 1976, 10185, 198, 3548, 1587, 123,
          4507, 2634, 3305, 30, 10545, 251, 109, 12859, 105, 42334, 18923, 96, 149, 97, 149, 98,
          1587, 110, 126, 111, 2343, 227, 104},
     }},
    {"llama-bpe",
     {
         {15496, 11, 331, 6, 439, 0, 314, 6, 6089, 1392, 220, 10163, 29228, 22, 22514, 6, 50, 628,
          220, 290, 201, 198, 220, 220, 19004, 19, 5254, 220, 220, 198},
         {3146, 220, 18, 13, 23756, 3270, 290, 220, 16, 11, 830, 11, 830, 26, 197, 5603, 4462,
          197, 197, 1456, 705, 3041, 705, 3069, 705, 67},
         {87, 220, 220, 220, 628, 198, 220, 220, 331, 220, 220, 1976, 10185, 198, 3548, 1587, 123,
          4507, 2634, 3305, 30, 10545, 251, 109, 12859, 105, 19004, 15, 220, 149, 96, 149, 97,
          149, 98, 220, 31185, 126, 111, 220, 158, 227, 104},
     }},
    {"qwen2",
     {
         {15496, 11, 331, 6, 439, 0, 314, 6, 6089, 1392, 220, 16, 17, 18, 19, 20, 21, 22, 22514,
          6, 50, 628, 220, 290, 201, 198, 220, 220, 17, 15, 17, 19, 5254, 220, 220, 198},
         {3146, 220, 18, 13, 16, 19, 16, 20, 24, 290, 220, 16, 11, 15, 15, 15, 11, 15, 15, 15, 26,
          197, 5603, 4462, 197, 197, 1456, 705, 3041, 705, 3069, 705, 67},
         {87, 220, 220, 220, 628, 198, 220, 220, 331, 220, 220, 1976, 10185, 198, 3548, 1587, 123,
          4507, 2634, 3305, 30, 10545, 251, 109, 12859, 105, 17, 15, 17, 15, 220, 149, 96, 149,
          97, 149, 98, 220, 31185, 126, 111, 220, 158, 227, 104},
     }},
    {"smollm",
     {
         {15496, 11, 331, 6, 439, 0, 314, 6, 6089, 1392, 220, 16, 17, 18, 19, 20, 21, 22, 22514,
          6, 50, 628, 220, 290, 201, 198, 220, 220, 17, 15, 17, 19, 5254, 220, 220, 198},
         {3146, 220, 18, 13, 16, 19, 16, 20, 24, 290, 220, 16, 11, 15, 15, 15, 11, 15, 15, 15, 26,
          197, 5603, 4462, 197, 197, 1456, 705, 3041, 705, 3069, 705, 67},
         {87, 220, 220, 220, 628, 198, 220, 220, 331, 220, 220, 1976, 10185, 198, 3548, 1587, 123,
          4507, 2634, 3305, 30, 10545, 251, 109, 12859, 105, 17, 15, 17, 15, 220, 149, 96, 149,
          97, 149, 98, 220, 31185, 126, 111, 220, 158, 227, 104},
     }},
};

TEST(PreTokenizerFamilies, MatchLlamaCpp) {
  const std::string path = VocabDir() + "/ggml-vocab-gpt-2.gguf";
  auto file = GgufFile::Open(path);
  if (!file.ok()) GTEST_SKIP() << file.status().ToString();
  for (const FamilyCase& fc : kFamilies) {
    GgufWriter w;
    for (const auto& [key, value] : (*file)->metadata()) {
      if (key != "tokenizer.ggml.pre") w.SetValue(key, value);
    }
    w.SetString("tokenizer.ggml.pre", fc.pre);
    const std::vector<uint8_t> bytes = w.Serialize();
    auto copy = GgufFile::FromMemory(bytes, fc.pre);
    ASSERT_TRUE(copy.ok()) << copy.status().ToString();
    auto tok = Tokenizer::FromGguf(**copy);
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    EXPECT_EQ((*tok)->pre(), fc.pre);
    for (size_t i = 0; i < fc.ids.size(); ++i) {
      const auto ids = (*tok)->Encode(kFamilyInputs[i], false);
      EXPECT_EQ(ids, fc.ids[i]) << fc.pre << " input " << i << "\n  got" << Show(ids);
      EXPECT_EQ((*tok)->Decode(ids), kFamilyInputs[i]) << fc.pre << " input " << i;
    }
  }
}

}  // namespace
}  // namespace kvtier
