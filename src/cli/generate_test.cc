// `kvtier generate` and `kvtier perplexity` on a small random test model: streaming, seeds,
// stop reasons, the perplexity method (checked against a direct computation from logits),
// and clear errors for bad input.
#include "cli/generate.h"

#include "cli/bench_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/model_session.h"
#include "cli/sequence_runner.h"
#include "kvtier/model.h"
#include "kvtier/test_model.h"

namespace kvtier::cli {
namespace {

class ModelCommands : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(::testing::TempDir() + "kvtier_generate_test_" +
                           std::to_string(getpid()));
    ASSERT_EQ(system(("mkdir -p " + *dir_).c_str()), 0);
    TestModelConfig c;
    c.arch = "llama";
    c.hidden = 128;
    c.layers = 2;
    c.heads = 2;
    c.kv_heads = 1;
    c.head_dim = 64;
    c.ffn = 256;
    c.vocab = 320;
    c.ctx = 4096;
    c.seed = 5;
    c.weight_type = GgmlType::kQ8_0;
    ASSERT_TRUE(WriteTestModel(c, *dir_ + "/m.gguf").ok());
    std::ofstream text(*dir_ + "/text.txt");
    for (int i = 0; i < 60; ++i) text << "It is a truth universally acknowledged, line " << i << ".\n";
  }
  static void TearDownTestSuite() {
    (void)system(("rm -rf " + *dir_).c_str());
    delete dir_;
  }
  static std::string Path(const char* name) { return *dir_ + "/" + name; }
  static std::string* dir_;
};
std::string* ModelCommands::dir_ = nullptr;

// The tokens of file `path` as `kvtier perplexity` encodes them (the model's BOS default, no
// special tokens parsed).
std::vector<int32_t> FileTokens(const LoadedModel& lm, const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return lm.tokenizer->Encode(ss.str(), lm.tokenizer->add_bos_default(), false);
}

TEST_F(ModelCommands, GenerateIsDeterministicPerSeedAndStopsAtMaxTokens) {
  GenerateConfig c;
  c.model = Path("m.gguf");
  c.prompt = "Hello";
  c.max_tokens = 12;
  c.threads = 2;
  std::ostringstream a, b;
  auto sa = RunGenerate(c, a);
  ASSERT_TRUE(sa.ok()) << sa.status().ToString();
  auto sb = RunGenerate(c, b);
  ASSERT_TRUE(sb.ok());
  EXPECT_EQ(a.str(), b.str());  // greedy
  auto lm = LoadModel(c.model);
  ASSERT_TRUE(lm.ok());
  // Byte tokens (the test model has no merges), after a BOS if the vocabulary adds one.
  EXPECT_EQ(sa->prompt_tokens, 5u + (lm->tokenizer->add_bos_default() ? 1u : 0u));
  EXPECT_TRUE(sa->stop_reason == "length" || sa->stop_reason == "eos");
  if (sa->stop_reason == "length") {
    EXPECT_EQ(sa->generated_tokens, 12u);
  }
  c.sampling.temperature = 1.0f;
  c.sampling.seed = 3;
  c.kv_type = "q8_0/q4_0";
  std::ostringstream s1, s2;
  ASSERT_TRUE(RunGenerate(c, s1).ok());
  ASSERT_TRUE(RunGenerate(c, s2).ok());
  EXPECT_EQ(s1.str(), s2.str());
}

TEST_F(ModelCommands, GenerateRejectsBadInput) {
  GenerateConfig c;
  c.model = Path("m.gguf");
  c.prompt = "x";
  c.kv_type = "q7_0";
  std::ostringstream o;
  auto r = RunGenerate(c, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--kv-type"), std::string::npos) << r.status().message();
  c.kv_type = "f16";
  c.sampling.top_p = 2.0f;
  EXPECT_NE(RunGenerate(c, o).status().message().find("top_p"), std::string::npos);
  c.sampling.top_p = 1.0f;
  c.model = Path("missing.gguf");
  r = RunGenerate(c, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("missing.gguf"), std::string::npos) << r.status().message();
}

// The reported perplexity equals exp(mean NLL) of the second half of each window computed
// here from the model's logits directly.
TEST_F(ModelCommands, PerplexityFollowsTheMethod) {
  PerplexityConfig c;
  c.model = Path("m.gguf");
  c.file = Path("text.txt");
  c.ctx = 64;
  c.batch = 24;  // windows fed in several calls
  c.chunks = 3;
  c.threads = 2;
  auto r = RunPerplexity(c, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->chunks, 3u);
  EXPECT_EQ(r->tokens_scored, 3u * (64 / 2 - 1));
  EXPECT_EQ(r->k_format, "f16");

  auto lm = LoadModel(c.model);
  ASSERT_TRUE(lm.ok());
  const std::vector<int32_t> tokens = FileTokens(*lm, c.file);
  const size_t V = lm->model->config().n_vocab;
  double nll = 0.0;
  int n = 0;
  for (int w = 0; w < 3; ++w) {
    std::vector<int32_t> win(tokens.begin() + w * 64, tokens.begin() + (w + 1) * 64);
    if (lm->tokenizer->add_bos_default()) win[0] = lm->tokenizer->bos_id();
    auto pool = MakeKvPool(lm->model->config(), "kv", "f16", 64);
    ASSERT_TRUE(pool.ok());
    BatchCache cache(*pool);
    ASSERT_TRUE(cache.Add(SequenceCache(*pool)).ok());
    std::vector<float> logits(64 * V);
    std::span<const int32_t> rows[1] = {win};
    ASSERT_TRUE(lm->model->Forward(cache, rows, true, logits.data(), nullptr).ok());
    for (int j = 32; j < 63; ++j) {
      double sum = 0.0;
      for (size_t i = 0; i < V; ++i) sum += std::exp(double(logits[j * V + i]));
      nll -= double(logits[j * V + tokens[w * 64 + j + 1]]) - std::log(sum);
      ++n;
    }
  }
  EXPECT_NEAR(r->ppl, std::exp(nll / n), 1e-3 * r->ppl);
  EXPECT_GT(r->ppl_stderr, 0.0);
  const std::string json = FormatPerplexityJson(*r);
  for (const char* key : {"\"ppl\"", "\"ppl_stderr\"", "\"tokens_scored\"", "\"ctx\"",
                          "\"k_format\"", "\"v_format\""}) {
    EXPECT_NE(json.find(key), std::string::npos) << key;
  }
}

// --kld: ppl_base, the mean / 99th-percentile KL divergence and same-top1 equal a direct
// computation from the logits of the same windows fed with f16 KV and with --kv-type.
TEST_F(ModelCommands, PerplexityKldMatchesADirectComputation) {
  PerplexityConfig c;
  c.model = Path("m.gguf");
  c.file = Path("text.txt");
  c.ctx = 64;
  c.batch = 24;
  c.chunks = 2;
  c.threads = 2;
  c.kv_type = "rot2s3";  // coarse enough that the distributions differ visibly
  c.kld = true;
  auto r = RunPerplexity(c, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->has_kld);
  EXPECT_EQ(r->k_format, "rot2s3");

  auto lm = LoadModel(c.model);
  ASSERT_TRUE(lm.ok());
  const std::vector<int32_t> tokens = FileTokens(*lm, c.file);
  const size_t V = lm->model->config().n_vocab;
  auto logits_of = [&](const std::vector<int32_t>& win, const char* kv) {
    auto pool = MakeKvPool(lm->model->config(), "kv", kv, 64);
    EXPECT_TRUE(pool.ok());
    BatchCache cache(*pool);
    EXPECT_TRUE(cache.Add(SequenceCache(*pool)).ok());
    std::vector<float> logits(64 * V);
    std::span<const int32_t> rows[1] = {win};
    EXPECT_TRUE(lm->model->Forward(cache, rows, true, logits.data(), nullptr).ok());
    return logits;
  };
  double nll_base = 0.0, kld = 0.0;
  int n = 0, same = 0;
  std::vector<double> all;
  for (int w = 0; w < 2; ++w) {
    std::vector<int32_t> win(tokens.begin() + w * 64, tokens.begin() + (w + 1) * 64);
    if (lm->tokenizer->add_bos_default()) win[0] = lm->tokenizer->bos_id();
    const std::vector<float> base = logits_of(win, "f16"), test = logits_of(win, "rot2s3");
    for (int j = 32; j < 63; ++j) {
      const float* b = base.data() + j * V;
      const float* t = test.data() + j * V;
      double zb = 0.0, zt = 0.0;
      for (size_t i = 0; i < V; ++i) {
        zb += std::exp(double(b[i]));
        zt += std::exp(double(t[i]));
      }
      nll_base -= double(b[tokens[w * 64 + j + 1]]) - std::log(zb);
      double k = 0.0;
      for (size_t i = 0; i < V; ++i) {
        const double pb = std::exp(double(b[i])) / zb, pt = std::exp(double(t[i])) / zt;
        k += pb * std::log(pb / pt);
      }
      kld += k;
      all.push_back(k);
      same += std::max_element(b, b + V) - b == std::max_element(t, t + V) - t;
      ++n;
    }
  }
  std::sort(all.begin(), all.end());
  const double p = 0.99 * (n - 1);
  const size_t ip = static_cast<size_t>(p);
  const double p99 = all[ip] + (p - double(ip)) * (all[ip + 1] - all[ip]);
  EXPECT_NEAR(r->ppl_base, std::exp(nll_base / n), 1e-3 * r->ppl_base);
  EXPECT_GT(kld / n, 1e-6);  // the formats really differ
  EXPECT_NEAR(r->kld, kld / n, 1e-3 * kld / n + 1e-9);
  EXPECT_NEAR(r->kld_p99, p99, 1e-3 * p99 + 1e-9);
  EXPECT_DOUBLE_EQ(r->same_top1, double(same) / n);
  const std::string json = FormatPerplexityJson(*r);
  for (const char* key : {"\"ppl_base\"", "\"kld\"", "\"kld_p99\"", "\"same_top1\""}) {
    EXPECT_NE(json.find(key), std::string::npos) << key;
  }
  // Against itself: no divergence, every top-1 the same.
  c.kv_type = "f16";
  r = RunPerplexity(c, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kld, 0.0);
  EXPECT_EQ(r->same_top1, 1.0);
  EXPECT_DOUBLE_EQ(r->ppl, r->ppl_base);
}

TEST_F(ModelCommands, PerplexityNeedsTwoWindows) {
  PerplexityConfig c;
  c.model = Path("m.gguf");
  c.file = Path("text.txt");
  c.ctx = 4096;
  auto r = RunPerplexity(c, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("at least 2 * ctx"), std::string::npos)
      << r.status().message();
  c.ctx = 64;
  c.file = Path("nope.txt");
  EXPECT_NE(RunPerplexity(c, nullptr).status().message().find("--file"), std::string::npos);
}

// --device: cpu always; cuda only in a build with the CUDA backend, else an error naming the
// build option (before the model is loaded); anything else names the value.
TEST_F(ModelCommands, DeviceIsCheckedBeforeTheModelLoads) {
  GenerateConfig g;
  g.model = Path("m.gguf");
  g.prompt = "Hello";
  g.max_tokens = 2;
  g.device = "tpu";
  std::ostringstream out;
  auto r = RunGenerate(g, out);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("--device: expected cpu or cuda, got 'tpu'"),
            std::string::npos) << r.status().message();
  PerplexityConfig p;
  p.model = Path("m.gguf");
  p.file = Path("text.txt");
  p.ctx = 64;
  p.device = "cuda";
  if (!CudaBackendBuilt()) {
    auto pr = RunPerplexity(p, nullptr);
    ASSERT_FALSE(pr.ok());
    EXPECT_NE(pr.status().message().find("built without the CUDA backend"), std::string::npos)
        << pr.status().message();
    EXPECT_NE(pr.status().message().find("-DKVTIER_CUDA=ON"), std::string::npos);
  } else {
    EXPECT_TRUE(CheckDevice("cuda").ok());
  }
  EXPECT_TRUE(CheckDevice("cpu").ok());
}

TEST_F(ModelCommands, BenchModelMeasuresEveryFormatAndDepth) {
  BenchModelConfig c;
  c.model = Path("m.gguf");
  c.depths = "0,100";
  c.kv_types = "f16,q8_0/q4_0";
  c.prefill = 9;
  c.decode = 3;
  c.repeats = 2;
  c.threads = 2;
  auto r = RunBenchModel(c, nullptr);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->rows.size(), 4u);
  for (const auto& row : r->rows) {
    EXPECT_GT(row.prefill_tok_s, 0.0);
    EXPECT_GT(row.decode_tok_s, 0.0);
    EXPECT_GT(row.kv_bytes, 0u);
    // Per CPU-second of all threads: finite, positive, and not above 2 threads' worth of
    // the wall-clock rate (CPU time can't run ahead of 2 busy threads), with slack for the
    // two clocks' granularity.
    EXPECT_GT(row.prefill_cpu_tok_s, 0.0);
    EXPECT_GT(row.decode_cpu_tok_s, 0.0);
    EXPECT_GT(row.prefill_cpu_tok_s * 2.5, row.prefill_tok_s);
  }
  EXPECT_EQ(r->rows[1].depth, 100u);
  EXPECT_EQ(r->rows[2].kv_type, "q8_0/q4_0");
  // The q8_0/q4_0 cache holds fewer bytes than f16 at the same depth.
  EXPECT_LT(r->rows[3].kv_bytes, r->rows[1].kv_bytes);
  const std::string json = FormatBenchModelJson(*r);
  EXPECT_NE(json.find("\"decode_tok_s\""), std::string::npos);
  EXPECT_NE(json.find("\"prefill_cpu_tok_s\""), std::string::npos);
  c.kv_types = "q9_9";
  EXPECT_NE(RunBenchModel(c, nullptr).status().message().find("--kv-type"), std::string::npos);
}

}  // namespace
}  // namespace kvtier::cli

namespace kvtier::cli {
namespace {

// qwen35 generates through the KV cache with each row's recurrent state (Model::Forward with
// states): greedy text equals a greedy loop that re-runs the whole sequence through
// ForwardSequence each step, whatever the prompt chunking; perplexity runs it too.
TEST(GenerateQwen35, GreedyMatchesAFromScratchLoop) {
  const std::string path = ::testing::TempDir() + "kvtier_generate_qwen35_" +
                           std::to_string(getpid()) + ".gguf";
  TestModelConfig mc;
  mc.arch = "qwen35";
  mc.hidden = 64;
  mc.layers = 4;
  mc.heads = 4;
  mc.kv_heads = 2;
  mc.head_dim = 64;  // a head size the fused attention kernel takes
  mc.ffn = 128;
  mc.vocab = 300;
  mc.ctx = 256;
  mc.weight_type = GgmlType::kF32;
  mc.weight_std = 0.3f;  // sharp logits: no near-ties for the greedy comparison
  mc.text_fillers = true;
  mc.seed = 9;
  ASSERT_TRUE(WriteTestModel(mc, path).ok());
  auto lm = LoadModel(path);
  ASSERT_TRUE(lm.ok()) << lm.status().ToString();
  GenerateConfig c;
  c.model = path;
  c.prompt = "It is a truth";
  c.max_tokens = 10;
  c.threads = 2;
  c.kv_type = "f32";
  std::vector<std::string> outs;
  for (uint32_t step : {512u, 3u}) {
    c.prefill_step = step;
    std::ostringstream o;
    auto st = RunGenerate(c, o);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    outs.push_back(o.str());
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_FALSE(outs[0].empty());
  // Greedy with the whole sequence re-run from a fresh state each step (no state carried;
  // ForwardSequence itself is checked against llama.cpp and float64 in model/qwen35_test.cc).
  std::vector<int32_t> seq = lm->tokenizer->Encode(c.prompt, lm->tokenizer->add_bos_default(),
                                                   false);
  const size_t V = lm->model->config().n_vocab, n_prompt = seq.size();
  std::vector<float> logits(V);
  for (uint32_t i = 0; i < c.max_tokens; ++i) {
    HybridSeqState fresh;
    ASSERT_TRUE(lm->model->ForwardSequence(&fresh, seq, false, logits.data(), nullptr).ok());
    const int32_t next =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (lm->tokenizer->IsEndOfGeneration(next)) break;
    seq.push_back(next);
  }
  const std::string want = lm->tokenizer->Decode(
      std::span<const int32_t>(seq).subspan(n_prompt));
  EXPECT_EQ(outs[0], want);

  // Perplexity over two windows (each from the zero state) against ForwardSequence's NLL.
  const std::string text_path = path + ".txt";
  {
    std::ofstream t(text_path);
    for (int k = 0; k < 40; ++k) t << "It is a truth universally acknowledged, that a man. ";
  }
  PerplexityConfig pc;
  pc.model = path;
  pc.file = text_path;
  pc.ctx = 32;
  pc.batch = 12;
  pc.chunks = 2;
  pc.threads = 2;
  pc.kv_type = "f32";
  auto pr = RunPerplexity(pc, nullptr);
  ASSERT_TRUE(pr.ok()) << pr.status().ToString();
  std::ifstream tin(text_path);
  std::stringstream ss;
  ss << tin.rdbuf();
  const auto toks = lm->tokenizer->Encode(ss.str(), lm->tokenizer->add_bos_default(), false);
  ASSERT_GE(toks.size(), 64u);
  double nll = 0.0;
  int count = 0;
  for (int w = 0; w < 2; ++w) {
    std::vector<int32_t> win(toks.begin() + w * 32, toks.begin() + (w + 1) * 32);
    if (lm->tokenizer->add_bos_default()) win[0] = lm->tokenizer->bos_id();
    HybridSeqState st;
    std::vector<float> all(32 * V);
    ASSERT_TRUE(lm->model->ForwardSequence(&st, win, true, all.data(), nullptr).ok());
    for (size_t j = 16; j + 1 < 32; ++j) {
      const float* l = all.data() + j * V;
      const double mx = *std::max_element(l, l + V);
      double sum = 0.0;
      for (size_t k = 0; k < V; ++k) sum += std::exp(double(l[k]) - mx);
      nll += -(double(l[toks[w * 32 + j + 1]]) - mx - std::log(sum));
      ++count;
    }
  }
  EXPECT_EQ(pr->tokens_scored, static_cast<uint64_t>(count));
  EXPECT_NEAR(pr->ppl, std::exp(nll / count), 1e-4 * std::exp(nll / count));
  std::remove(text_path.c_str());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kvtier::cli
