// `kvtier tokenize`: in process and through the real binary, on llama.cpp's vocab vectors.
#include "cli/tokenize.h"

#include "cli/cli_test_util.h"
#include "cli/model_session.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace kvtier::cli {
namespace {

std::string VocabFile(const char* name) {
  return std::string(KVTIER_SOURCE_DIR) + "/../shared/testdata/vocab/ggml-vocab-" + name + ".gguf";
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

// The vector file's inputs and expected output lines ("\n"-terminated, as the command prints).
bool LoadVectors(const std::string& base, std::vector<std::string>* in,
                 std::vector<std::string>* want) {
  std::string inp;
  std::string out;
  if (!ReadFile(base + ".inp", &inp) || !ReadFile(base + ".out", &out)) return false;
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (size_t pos = 0;;) {
    const size_t hit = inp.find(sep, pos);
    in->push_back(inp.substr(pos, hit == std::string::npos ? std::string::npos : hit - pos));
    if (hit == std::string::npos) break;
    pos = hit + sep.size();
  }
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream ids(line);
    std::string norm;
    for (std::string id; ids >> id;) {
      if (!norm.empty()) norm += ' ';
      norm += id;
    }
    norm += '\n';
    want->push_back(norm);
  }
  if (in->size() == want->size() + 1 && in->back().empty()) in->pop_back();
  return in->size() == want->size();
}

TEST(Tokenize, InProcessMatchesVectors) {
  const std::string model = VocabFile("gpt-2");
  std::vector<std::string> in;
  std::vector<std::string> want;
  if (!LoadVectors(model, &in, &want)) GTEST_SKIP() << "no vectors at " << model;
  // Each call loads the vocabulary again: a sample here, every input in VectorFile below.
  for (size_t i = 0; i < in.size(); i += 9) {
    std::istringstream is(in[i]);
    std::ostringstream os;
    ASSERT_TRUE(RunTokenize({model, false, true}, is, os).ok());
    EXPECT_EQ(os.str(), want[i]) << "input " << i;
  }
}

TEST(Tokenize, Errors) {
  std::istringstream is("x");
  std::ostringstream os;
  // No --model: the bundled model's tokenizer, or an error naming where it was looked for.
  Status s = RunTokenize({}, is, os);
  if (access(DefaultModelPath().c_str(), R_OK) == 0) {
    EXPECT_TRUE(s.ok()) << s.ToString();
    EXPECT_FALSE(os.str().empty());
  } else {
    EXPECT_NE(s.message().find(DefaultModelPath()), std::string::npos) << s.message();
  }
  s = RunTokenize({"/nonexistent/model.gguf", false, true}, is, os);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent/model.gguf"), std::string::npos) << s.message();
}

// Runs the binary with `stdin_path` as standard input; captures stdout (+stderr when asked).
int RunKvtier(const std::string& args, const std::string& stdin_path, std::string* out,
              bool with_stderr = false) {
  std::string cmd = KVTIER_BIN;
  cmd += " ";
  cmd += args;
  cmd += " < '";
  cmd += stdin_path;
  cmd += "'";
  if (with_stderr) cmd += " 2>&1";
  return testing::RunCommand(cmd, out);
}

std::string TempFile(const std::string& contents) {
  char path[] = "/tmp/kvtier_tokenize_XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  const ssize_t w = write(fd, contents.data(), contents.size());
  EXPECT_EQ(w, static_cast<ssize_t>(contents.size()));
  close(fd);
  return path;
}

std::string WithModel(const char* args, const std::string& model) {
  std::string s = args;
  s += " --model '";
  s += model;
  s += "'";
  return s;
}

TEST(TokenizeBinary, VectorFile) {
  const std::string model = VocabFile("llama-spm");
  std::vector<std::string> in;
  std::vector<std::string> want;
  if (!LoadVectors(model, &in, &want)) GTEST_SKIP() << "no vectors at " << model;
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string path = TempFile(in[i]);
    std::string out;
    EXPECT_EQ(RunKvtier(WithModel("tokenize", model), path, &out), 0);
    EXPECT_EQ(out, want[i]) << "input " << i;
    unlink(path.c_str());
  }
}

TEST(TokenizeBinary, Flags) {
  const std::string model = VocabFile("llama-spm");
  std::string unused;
  if (!ReadFile(model, &unused)) GTEST_SKIP() << "no " << model;
  const std::string path = TempFile("</s>Hello");
  std::string out;
  ASSERT_EQ(RunKvtier(WithModel("tokenize --add-bos", model), path, &out), 0);
  EXPECT_EQ(out.rfind("1 2 ", 0), 0u) << out;  // BOS, then </s> parsed as a control token
  out.clear();
  ASSERT_EQ(RunKvtier(WithModel("tokenize --no-parse-special", model), path, &out), 0);
  EXPECT_EQ(out.find(" 2 "), std::string::npos) << out;
  EXPECT_NE(out.rfind("1 ", 0), 0u) << out;
  out.clear();
  // Without --model: the bundled model's tokenizer, or an error naming where it looked.
  const int rc = RunKvtier("tokenize", path, &out, true);
  if (access(DefaultModelPath().c_str(), R_OK) == 0) {
    EXPECT_EQ(rc, 0) << out;
    EXPECT_FALSE(out.empty());
  } else {
    EXPECT_NE(rc, 0);
    EXPECT_NE(out.find(DefaultModelPath()), std::string::npos) << out;
  }
  unlink(path.c_str());
}

}  // namespace
}  // namespace kvtier::cli
