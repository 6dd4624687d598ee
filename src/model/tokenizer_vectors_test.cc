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

}  // namespace
}  // namespace kvtier
