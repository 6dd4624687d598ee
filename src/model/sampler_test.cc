// Sampler against simple models: greedy is argmax, sampled frequencies follow the softmax,
// top-k / top-p restrict the support, seeds reproduce, penalties shift choices.
#include "kvtier/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace kvtier {
namespace {

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  Sampler s(SamplingParams{});
  const std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f, NAN};
  EXPECT_EQ(s.Sample(l), 1);
  const std::vector<float> l2 = {-3.0f, -2.0f, -2.5f};
  EXPECT_EQ(s.Sample(l2), 1);
}

TEST(Sampler, FrequenciesFollowTheSoftmax) {
  SamplingParams p;
  p.temperature = 0.7f;
  p.seed = 42;
  Sampler s(p);
  const std::vector<float> l = {1.0f, 0.2f, -0.5f, 0.9f};
  std::vector<double> want(l.size());
  double sum = 0.0;
  for (size_t i = 0; i < l.size(); ++i) sum += (want[i] = std::exp(l[i] / 0.7));
  std::vector<int> count(l.size());
  const int n = 40000;
  for (int i = 0; i < n; ++i) ++count[s.Sample(l)];
  for (size_t i = 0; i < l.size(); ++i) {
    const double p_i = want[i] / sum;
    const double sd = std::sqrt(p_i * (1 - p_i) / n);
    EXPECT_NEAR(double(count[i]) / n, p_i, 5 * sd) << "token " << i;
  }
}

TEST(Sampler, TopKAndTopPRestrictTheSupport) {
  const std::vector<float> l = {std::log(0.5f), std::log(0.3f), std::log(0.15f),
                                std::log(0.05f)};
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 2;
  Sampler k2(p);
  p.top_k = 0;
  p.top_p = 0.7f;  // 0.5 + 0.3 reaches it: tokens 0 and 1
  Sampler tp(p);
  std::map<int, int> seen_k, seen_p;
  for (int i = 0; i < 3000; ++i) {
    ++seen_k[k2.Sample(l)];
    ++seen_p[tp.Sample(l)];
  }
  EXPECT_EQ(seen_k.size(), 2u);
  EXPECT_EQ(seen_p.size(), 2u);
  EXPECT_GT(seen_k[1], 0);
  EXPECT_GT(seen_p[1], 0);
  EXPECT_EQ(seen_k.count(2) + seen_p.count(2) + seen_k.count(3) + seen_p.count(3), 0u);
  // top_k 1 is greedy whatever the temperature.
  p = SamplingParams{};
  p.temperature = 5.0f;
  p.top_k = 1;
  Sampler one(p);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(one.Sample(l), 0);
}

TEST(Sampler, SeedsReproduce) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 7;
  std::vector<float> l(1000);
  for (size_t i = 0; i < l.size(); ++i) l[i] = std::sin(float(i)) * 3.0f;
  Sampler a(p), b(p);
  p.seed = 8;
  Sampler c(p);
  int differ = 0;
  for (int i = 0; i < 50; ++i) {
    const int32_t x = a.Sample(l);
    EXPECT_EQ(x, b.Sample(l));
    differ += x != c.Sample(l);
  }
  EXPECT_GT(differ, 10);
}

TEST(Sampler, PenaltiesDiscourageRepeats) {
  SamplingParams p;
  p.frequency_penalty = 0.4f;
  Sampler s(p);
  const std::vector<float> l = {1.0f, 0.5f, 0.0f};
  EXPECT_EQ(s.Sample(l), 0);  // 1.0
  EXPECT_EQ(s.Sample(l), 0);  // 1.0 - 0.4 = 0.6 > 0.5
  EXPECT_EQ(s.Sample(l), 1);  // 1.0 - 0.8 = 0.2 < 0.5
  p = SamplingParams{};
  p.presence_penalty = 0.6f;
  Sampler q(p);
  EXPECT_EQ(q.Sample(l), 0);
  EXPECT_EQ(q.Sample(l), 1);  // 0.4 < 0.5
  EXPECT_EQ(q.Sample(l), 0);  // 0.4 > 0.5 - 0.6
}

TEST(Sampler, ValidateNamesTheField) {
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_NE(p.Validate().message().find("top_p"), std::string::npos);
  p = SamplingParams{};
  p.temperature = -1.0f;
  EXPECT_NE(p.Validate().message().find("temperature"), std::string::npos);
  p = SamplingParams{};
  p.frequency_penalty = 3.0f;
  EXPECT_NE(p.Validate().message().find("frequency_penalty"), std::string::npos);
  EXPECT_TRUE(SamplingParams{}.Validate().ok());
}

}  // namespace
}  // namespace kvtier
