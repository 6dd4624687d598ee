// kvtier-bench attention: every configuration gets a row with consistent derived columns, the JSON
// carries the keys, and bad flags name the flag.
#include "cli/bench_attention.h"

#include <algorithm>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace kvtier::cli {
namespace {

BenchAttentionConfig Small() {
  BenchAttentionConfig c;
  c.ctx = "64,200";
  c.batches = "1,2";
  c.prefill_ctx = "96";
  c.prefill_chunk = 16;
  c.heads = 8;
  c.kv_heads = 2;
  c.head_dim = 64;
  c.block_tokens = 16;
  c.formats = "f16,q4_0,q8_0/q4_0";
  c.repeats = 2;
  c.threads = 2;
  return c;
}

TEST(BenchAttention, RowsForEveryConfigurationWithConsistentColumns) {
  Result<BenchAttentionReport> r = RunBenchAttention(Small());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // 2 contexts x 2 batches decode + 1 prefill, for 3 formats.
  ASSERT_EQ(r->rows.size(), 15u);
  EXPECT_GT(r->memcpy_gbps, 0.0);
  EXPECT_GT(r->read_gbps, 0.0);
  EXPECT_GT(r->peak_gflops, 0.0);
  for (const BenchAttentionRow& row : r->rows) {
    SCOPED_TRACE(::testing::Message() << row.mode << " " << row.ctx << " " << row.k_format << "/"
                                      << row.v_format);
    EXPECT_GT(row.ms, 0.0);
    const uint64_t row_bytes = (row.k_format == "f16" ? 128u : row.k_format == "q8_0" ? 68u : 36u) +
                               (row.v_format == "f16" ? 128u : 36u);
    EXPECT_EQ(row.kv_bytes, uint64_t{row.batch} * row.ctx * 2 * row_bytes);
    EXPECT_NEAR(row.vs_floor, row.ms / row.floor_ms, 1e-9);
    EXPECT_NEAR(row.vs_read_floor, row.ms / row.read_floor_ms, 1e-9);
    // Both floors: the larger of the bytes' time (at the memcpy or the read probe's GB/s) and
    // the FLOPs' time at the peak.
    const double flop_ms = row.gflops * row.ms / r->peak_gflops;
    const double bytes = static_cast<double>(row.kv_bytes);
    EXPECT_NEAR(row.floor_ms, std::max(bytes / (r->memcpy_gbps * 1e6), flop_ms),
                1e-9 * row.floor_ms);
    EXPECT_NEAR(row.read_floor_ms, std::max(bytes / (r->read_gbps * 1e6), flop_ms),
                1e-9 * row.read_floor_ms);
    EXPECT_GT(row.speedup_vs_f16, 0.0);
    if (row.k_format == "f16") {
      EXPECT_DOUBLE_EQ(row.speedup_vs_f16, 1.0);
    }
    EXPECT_EQ(row.queries, row.mode == "decode" ? 1u : 16u);
  }
  EXPECT_EQ(r->rows.front().mode, "decode");
  EXPECT_EQ(r->rows.back().mode, "prefill");
}

TEST(BenchAttention, JsonKeys) {
  BenchAttentionConfig c = Small();
  c.modes = "decode";
  c.ctx = "64";
  c.batches = "1";
  c.repeats = 1;
  Result<BenchAttentionReport> r = RunBenchAttention(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const nlohmann::json j = nlohmann::json::parse(FormatBenchAttentionJson(*r));
  EXPECT_TRUE(j.contains("memcpy_gbps"));
  EXPECT_TRUE(j.contains("read_gbps"));
  EXPECT_TRUE(j.contains("peak_gflops"));
  for (const char* k : {"mode", "ctx", "batch", "k_format", "v_format", "ms", "gbps", "gflops",
                        "floor_ms", "vs_floor", "read_floor_ms", "vs_read_floor",
                        "speedup_vs_f16"}) {
    EXPECT_TRUE(j["rows"][0].contains(k)) << k;
  }
  EXPECT_EQ(j["rows"][2]["k_format"], "q8_0");
  EXPECT_EQ(j["rows"][2]["v_format"], "q4_0");
  EXPECT_NE(FormatBenchAttentionTable(*r).find("x floor"), std::string::npos);
  EXPECT_NE(FormatBenchAttentionTable(*r).find("read probe"), std::string::npos);
}

TEST(BenchAttention, BadFlagsNameTheFlag) {
  struct Case {
    void (*edit)(BenchAttentionConfig&);
    const char* says;
  } cases[] = {
      {[](BenchAttentionConfig& c) { c.heads = 6; c.kv_heads = 4; }, "--heads 6 must be a multiple of --kv-heads 4"},
      {[](BenchAttentionConfig& c) { c.modes = "decode,train"; }, "--modes: 'train' unknown"},
      {[](BenchAttentionConfig& c) { c.formats = "q4_1"; }, "--kv-type"},
      {[](BenchAttentionConfig& c) { c.ctx = std::string("0"); }, "--ctx"},
      {[](BenchAttentionConfig& c) { c.prefill_ctx = std::string("8"); }, "--prefill-ctx: expected 16.."},
      {[](BenchAttentionConfig& c) { c.head_dim = 48; }, "head_dim 48"},
  };
  for (const Case& cs : cases) {
    BenchAttentionConfig c = Small();
    cs.edit(c);
    Result<BenchAttentionReport> r = RunBenchAttention(c);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(cs.says), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace kvtier::cli
