// kvtier-bench kv-paged: bytes per token as the formats define them, batch operations that copy no
// K/V bytes, a fork's first append copying only its tail, JSON shape, clear flag errors.
#include "cli/bench_kv_paged.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "kvtier/kv_types.h"

namespace kvtier::cli {
namespace {

BenchKvPagedConfig Small() {
  BenchKvPagedConfig c;
  c.layers = 2;
  c.kv_heads = 2;
  c.head_dim = 64;
  c.block_tokens = 16;
  c.rows = 4;
  c.contexts = "64,300";
  c.repeats = 3;
  c.threads = 2;
  return c;
}

TEST(BenchKvPaged, BytesPerTokenAndZeroCopyOperations) {
  BenchKvPagedConfig c = Small();
  c.formats = "f16,q4_0,affine4g64,q8_0/q4_0";
  Result<BenchKvPagedReport> r = RunBenchKvPaged(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->formats.size(), 4u);
  const KvShape shape{2, 2, 64};
  EXPECT_EQ(r->formats[0].bytes_per_token, KvBytesPerToken(shape, Format::F16(), Format::F16()));
  EXPECT_EQ(r->formats[0].bytes_per_token, 2u * 2 * 2 * 64 * 2);
  EXPECT_EQ(r->formats[1].bytes_per_token, 2u * 2 * 2 * 36);
  EXPECT_EQ(r->formats[2].bytes_per_token, r->formats[1].bytes_per_token);
  EXPECT_EQ(r->formats[3].name, "q8_0/q4_0");
  EXPECT_EQ(r->formats[3].bytes_per_token, 2u * 2 * (68 + 36));
  EXPECT_DOUBLE_EQ(r->formats[1].bits_per_value, 4.5);
  EXPECT_NEAR(r->formats[1].vs_f16, 256.0 / 72.0, 1e-12);

  ASSERT_EQ(r->ops.size(), 2u);
  for (const BenchKvPagedOps& o : r->ops) {
    SCOPED_TRACE(o.context);
    EXPECT_EQ(o.merge_copied, 0u);
    EXPECT_EQ(o.extract_copied, 0u);
    EXPECT_EQ(o.filter_copied, 0u);
    EXPECT_EQ(o.extend_copied, 0u);
    EXPECT_GT(o.fill_tokens_per_s, 0.0);
    EXPECT_GT(o.merge_us, 0.0);
    // Rows hold context - 3i tokens; 64 and 300 leave partly filled tails, and the fork's
    // first append copies exactly those rows (K and V, every layer) of one row.
    EXPECT_GT(o.fork_append_copied, 0u);
    EXPECT_LE(o.fork_append_copied, 15u * 2 * 2 * (36 + 36));
  }
  // Every row's blocks are in use: sum of ceil((context - 3i) / 16) blocks.
  uint64_t blocks = 0;
  for (uint32_t i = 0; i < 4; ++i) blocks += (300 - 3 * i + 15) / 16;
  const uint64_t stride = 8192;  // 2 layers x (K + V: 16 tokens x 2 heads x 36 bytes) -> pages
  EXPECT_EQ(r->ops[1].kv_bytes, blocks * stride);
}

TEST(BenchKvPaged, JsonHasEveryKey) {
  BenchKvPagedConfig c = Small();
  c.contexts = "48";
  c.repeats = 1;
  Result<BenchKvPagedReport> r = RunBenchKvPaged(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const nlohmann::json j = nlohmann::json::parse(FormatBenchKvPagedJson(*r));
  for (const char* k : {"config", "formats", "ops", "ops_format", "peak_rss_bytes"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_EQ(j["formats"].size(), 7u);  // the default list
  for (const char* k : {"context", "merge_us", "extract_us", "filter_us", "extend_us",
                        "fork_append_us", "merge_copied_bytes", "extend_copied_bytes"}) {
    EXPECT_TRUE(j["ops"][0].contains(k)) << k;
  }
  EXPECT_NE(FormatBenchKvPagedTable(*r).find("fork + 1st append"), std::string::npos);
}

TEST(BenchKvPaged, BadFlagsNameTheFlag) {
  struct Case {
    void (*edit)(BenchKvPagedConfig&);
    StatusCode code;
    const char* says;
  } cases[] = {
      {[](BenchKvPagedConfig& c) { c.ops_format = "q5_9"; }, StatusCode::kInvalidArgument,
       "--timed-kv-type"},
      {[](BenchKvPagedConfig& c) { c.formats = "f16,q4_0/nope"; }, StatusCode::kInvalidArgument,
       "--kv-type"},
      {[](BenchKvPagedConfig& c) { c.contexts = "64,abc"; }, StatusCode::kInvalidArgument,
       "--contexts: 'abc' is not a number"},
      {[](BenchKvPagedConfig& c) { c.rows = 1; }, StatusCode::kInvalidArgument, "--rows"},
      {[](BenchKvPagedConfig& c) { c.head_dim = 48; }, StatusCode::kInvalidArgument,
       "head_dim 48"},
      {[](BenchKvPagedConfig& c) {
         c.layers = 64;
         c.kv_heads = 64;
         c.head_dim = 256;
         c.rows = 64;
         c.contexts = "1000000";
         c.ops_format = "f32";
       },
       StatusCode::kResourceExhausted, "of RAM"},
  };
  for (const Case& cs : cases) {
    BenchKvPagedConfig c = Small();
    cs.edit(c);
    Result<BenchKvPagedReport> r = RunBenchKvPaged(c);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), cs.code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(cs.says), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace kvtier::cli
