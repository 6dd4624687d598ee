// CudaModel::ForwardRows (kvtier/cuda_model.h): a step of several sequences at once, prompt
// chunks beside decode rows, each row over its own block table (blocks the test hands out,
// interleaved and out of order; one row starting on another row's full first block). Every
// row's logits are compared with the same sequence run alone through Forward (the
// one-sequence path, its own CudaModel). And the tier move: a row's blocks copied to host
// memory and into a second CudaModel continue there with the same logits bit for bit.
// Skips without a usable GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kvtier/cuda_model.h"
#include "model/model_test_util.h"

namespace kvtier {
namespace {

class CudaRowsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!CudaDeviceAvailable(&why)) GTEST_SKIP() << "no usable GPU: " << why;
  }
};

TestModelConfig Small(const std::string& arch) {
  TestModelConfig c;
  c.arch = arch;
  c.hidden = 256;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 64;
  c.ffn = 512;
  c.vocab = 512;
  c.ctx = 4096;
  c.rope_theta = 10000.0;
  c.rms_eps = 1e-5;
  c.weight_type = GgmlType::kQ8_0;
  c.weight_std = 0.08f;
  c.seed = 5;
  if (arch == "gemma3") {
    c.sliding_window = 12;
    c.swa_period = 2;
    c.final_softcap = 30.0;
  }
  return c;
}

double RelMax(const float* a, const float* b, size_t n) {
  double d = 0, m = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    d = std::max(d, std::abs(double(a[i]) - double(b[i])));
    m = std::max(m, std::abs(double(b[i])));
  }
  return d / (m > 0 ? m : 1);
}

constexpr uint32_t kBlock = 32;

// One sequence of the batch: its tokens so far, its block table (ids the test hands out), and
// its own one-sequence CudaModel for the reference logits.
struct Seq {
  std::vector<int32_t> tokens;  // every token fed so far
  std::vector<BlockId> blocks;
  uint32_t length = 0;
  std::unique_ptr<CudaModel> alone;
};

// The schedule: per step, (sequence, tokens); sequence 4 starts on sequence 0's first block.
using Step = std::vector<std::pair<int, uint32_t>>;
std::vector<Step> Schedule() {
  std::vector<Step> s = {
      {{0, 40}, {1, 7}},                          // two prompts
      {{0, 1}, {1, 20}, {2, 3}},                  // a decode row beside prompt chunks
      {{0, 1}, {1, 1}, {2, 1}},                   // decode rows only (the graph)
      {{0, 1}, {1, 1}, {2, 1}, {3, 33}, {4, 5}},  // a prompt beside decodes; 4 shares 0's block
  };
  for (int i = 0; i < 6; ++i) s.push_back({{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}});
  return s;
}

double RunBatch(const Model& m, Format kv, const std::string& what) {
  const size_t V = m.config().n_vocab;
  CudaModelOptions o;
  o.k_format = o.v_format = kv;
  o.max_tokens = 512;
  o.max_batch = 128;
  o.block_tokens = kBlock;
  CudaModelOptions rows_o = o;
  rows_o.pool_blocks = 64;
  auto batch = CudaModel::Create(m, rows_o);
  EXPECT_TRUE(batch.ok()) << what << ": " << batch.status().ToString();
  if (!batch.ok()) return INFINITY;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(V) - 1);
  // Block ids handed out in a shuffled order, so no row's table is contiguous.
  std::vector<BlockId> free_ids(64);
  for (int i = 0; i < 64; ++i) free_ids[i] = i;
  std::shuffle(free_ids.begin(), free_ids.end(), rng);
  std::vector<Seq> seqs(5);
  for (auto& s : seqs) {
    auto a = CudaModel::Create(m, o);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    if (!a.ok()) return INFINITY;
    s.alone = std::move(*a);
  }
  double worst = 0;
  bool started4 = false;
  for (const Step& step : Schedule()) {
    std::vector<std::vector<int32_t>> chunk(step.size());
    std::vector<CudaRow> rows(step.size());
    std::vector<float> want(step.size() * V), got(step.size() * V);
    for (size_t r = 0; r < step.size(); ++r) {
      Seq& s = seqs[step[r].first];
      if (step[r].first == 4 && !started4) {  // sequence 0's first 32 tokens, already in its block
        started4 = true;
        s.tokens.assign(seqs[0].tokens.begin(), seqs[0].tokens.begin() + kBlock);
        s.blocks = {seqs[0].blocks[0]};
        s.length = kBlock;
        std::vector<float> skip(V);
        EXPECT_TRUE(s.alone->Forward(s.tokens, false, skip.data()).ok());
      }
      chunk[r].resize(step[r].second);
      for (auto& t : chunk[r]) t = id(rng);
      while (s.blocks.size() * kBlock < s.length + chunk[r].size()) {
        s.blocks.push_back(free_ids.back());
        free_ids.pop_back();
      }
      rows[r].blocks = s.blocks;
      rows[r].length = s.length;
      rows[r].tokens = chunk[r];
      const Status a = s.alone->Forward(chunk[r], false, want.data() + r * V);
      EXPECT_TRUE(a.ok()) << what << ": " << a.ToString();
    }
    std::vector<Status> st;
    const Status b = (*batch)->ForwardRows(rows, got.data(), &st);
    EXPECT_TRUE(b.ok()) << what << ": " << b.ToString();
    if (!b.ok()) return INFINITY;
    for (size_t r = 0; r < step.size(); ++r) {
      EXPECT_TRUE(st[r].ok()) << st[r].ToString();
      worst = std::max(worst, RelMax(got.data() + r * V, want.data() + r * V, V));
      Seq& s = seqs[step[r].first];
      s.length += step[r].second;
      s.tokens.insert(s.tokens.end(), chunk[r].begin(), chunk[r].end());
    }
  }
  return worst;
}

// Bounds as the CPU comparison's (model_test.cc): a row's products run as a GEMM in the batch
// and as a matvec alone (or the other way), so f32 sums differ in order; q8_0 K/V codes can
// then differ by one step.
TEST_F(CudaRowsTest, EachRowMatchesTheSequenceRunAlone) {
  for (const std::string arch : {"llama", "qwen3", "phi3", "gemma3"}) {
    auto tm = testing::LoadTestModel(Small(arch), arch);
    ASSERT_TRUE(tm.ok()) << arch << ": " << tm.status().ToString();
    for (const Format kv : {Format::F16(), Format::Q8_0()}) {
      const std::string what = arch + " q8_0 weights, KV " + kv.spec();
      const double err = RunBatch(*tm->model, kv, what);
      const double bound = kv.kind == FormatKind::kQ8_0 ? 1e-2 : 2e-3;
      std::printf("%-32s rows vs alone: worst logit error %.3g (bound %.0e)\n", what.c_str(),
                  err, bound);
      EXPECT_LT(err, bound) << what;
    }
  }
}

// A row's blocks go to host memory and up into another CudaModel (other block ids there): its
// next steps give the same logits as continuing on the first, bit for bit.
TEST_F(CudaRowsTest, BlocksMovedThroughHostMemoryContinueTheSameSequence) {
  auto tm = testing::LoadTestModel(Small("qwen3"), "qwen3");
  ASSERT_TRUE(tm.ok());
  const size_t V = tm->model->config().n_vocab;
  CudaModelOptions o;
  o.k_format = o.v_format = Format::Q8_0();
  o.max_tokens = 512;
  o.max_batch = 128;
  o.pool_blocks = 16;
  auto a = CudaModel::Create(*tm->model, o);
  auto b = CudaModel::Create(*tm->model, o);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<int32_t> prompt(70);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37) % V);
  const std::vector<BlockId> ids = {9, 2, 5};
  std::vector<float> la(V), lb(V);
  CudaRow r{ids, 0, prompt};
  ASSERT_TRUE((*a)->ForwardRows(std::span<const CudaRow>(&r, 1), la.data()).ok());
  std::vector<uint8_t> host(16 * (*a)->block_stride(), 0xEE);
  ASSERT_TRUE((*a)->CopyBlocksToHost(ids, host.data()).ok());
  ASSERT_TRUE((*b)->CopyBlocksFromHost(ids, host.data()).ok());
  uint32_t len = 70;
  int32_t next = 3;
  for (int i = 0; i < 20; ++i) {
    CudaRow s{ids, len, std::span<const int32_t>(&next, 1)};
    ASSERT_TRUE((*a)->ForwardRows(std::span<const CudaRow>(&s, 1), la.data()).ok());
    ASSERT_TRUE((*b)->ForwardRows(std::span<const CudaRow>(&s, 1), lb.data()).ok());
    ASSERT_EQ(la, lb) << "step " << i;
    next = static_cast<int32_t>(std::max_element(la.begin(), la.end()) - la.begin());
    ++len;
  }
  // The refusals name what is wrong.
  CudaRow few{std::span<const BlockId>(ids.data(), 1), len, std::span<const int32_t>(&next, 1)};
  const Status s = (*a)->ForwardRows(std::span<const CudaRow>(&few, 1), la.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("blocks for"), std::string::npos) << s.ToString();
  const std::vector<BlockId> outside = {99};
  EXPECT_FALSE((*a)->CopyBlocksToHost(outside, host.data()).ok());
  EXPECT_FALSE((*a)->Forward(prompt, false, la.data()).ok());  // caller-managed blocks
}

}  // namespace
}  // namespace kvtier
