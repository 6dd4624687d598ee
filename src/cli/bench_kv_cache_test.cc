// kvtier-bench kv-cache: sizes exactly as computed from the formats, errors that follow from the
// formats, JSON shape, and clear errors for bad flags (in-process and through the binary).
#include "cli/bench_kv_cache.h"

#include "cli/cli_test_util.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/wait.h>

namespace kvtier::cli {
namespace {

BenchKvCacheConfig Small() {
  BenchKvCacheConfig c;
  c.layers = 2;
  c.seq_len = 96;
  c.heads = 4;
  c.head_dim = 128;
  c.repeats = 1;
  c.threads = 2;
  c.threads = 3;  // uneven split: 384 rows per tensor over 3 threads
  return c;
}

TEST(BenchKvCache, SeedTableSizesWithF32Source) {
  BenchKvCacheConfig c = Small();
  c.dtype = DType::kF32;
  c.formats = "affine8,affine4";
  Result<BenchKvCacheReport> r = RunBenchKvCache(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->rows.size(), 3u);
  const uint64_t values = 2ull * 2 * 96 * 4 * 128;  // layers, K+V, tokens, heads, head_dim
  EXPECT_EQ(r->source_bytes, values * 4);
  EXPECT_EQ(r->rows[0].format, "f32");
  EXPECT_EQ(r->rows[0].memory_bytes, values * 4);
  EXPECT_EQ(r->rows[0].mean_abs_error, 0.0);
  EXPECT_EQ(r->rows[0].max_abs_error, 0.0);
  EXPECT_EQ(r->rows[1].format, "affine8g64");
  EXPECT_EQ(r->rows[1].memory_bytes, values * 9 / 8);  // 8 bits + f32 scale and bias per 64
  EXPECT_NEAR(r->rows[1].compression, 32.0 / 9.0, 1e-12);
  EXPECT_EQ(r->rows[2].format, "affine4g64");
  EXPECT_NEAR(r->rows[2].compression, 6.4, 1e-12);
  // Standard-normal data: MLX's errors (seed 003) within a loose band for this small sample.
  EXPECT_NEAR(r->rows[1].mean_abs_error, 0.00456, 0.0005);
  EXPECT_NEAR(r->rows[2].mean_abs_error, 0.0771, 0.008);
  EXPECT_GT(r->rows[2].max_abs_error, r->rows[2].mean_abs_error);
  EXPECT_GT(r->memcpy_gbps, 0.0);
  EXPECT_GT(r->peak_rss_bytes, 0u);
  for (const auto& row : r->rows) {
    EXPECT_GT(row.quantize_gbps, 0.0) << row.format;
    EXPECT_GT(row.dequantize_gbps, 0.0) << row.format;
  }
}

TEST(BenchKvCache, F16SourceBitsPerValueAndDeterminism) {
  BenchKvCacheConfig c = Small();
  c.formats = "q8_0, affine8, q4_0, affine4g64";
  c.seed = 42;
  Result<BenchKvCacheReport> a = RunBenchKvCache(c);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->rows.size(), 5u);
  EXPECT_EQ(a->rows[0].format, "f16");
  EXPECT_EQ(a->rows[1].bits_per_value, 8.5);
  EXPECT_EQ(a->rows[2].bits_per_value, 8.5);
  EXPECT_EQ(a->rows[3].bits_per_value, 4.5);
  EXPECT_EQ(a->rows[4].bits_per_value, 4.5);
  // Same seed, other thread count: identical data, identical errors.
  c.threads = 1;
  Result<BenchKvCacheReport> b = RunBenchKvCache(c);
  ASSERT_TRUE(b.ok());
  for (size_t i = 0; i < a->rows.size(); ++i) {
    EXPECT_DOUBLE_EQ(a->rows[i].max_abs_error, b->rows[i].max_abs_error) << a->rows[i].format;
    EXPECT_NEAR(a->rows[i].mean_abs_error, b->rows[i].mean_abs_error, 1e-12) << a->rows[i].format;
  }
  c.seed = 43;
  Result<BenchKvCacheReport> other = RunBenchKvCache(c);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->rows[1].max_abs_error, a->rows[1].max_abs_error);
}

// A format wider than the source (f32 rows from f16 data) runs in several row ranges, down
// to one row per range.
TEST(BenchKvCache, WideFormatsRunInRowRanges) {
  for (int seq_len : {1, 7}) {
    BenchKvCacheConfig c = Small();
    c.seq_len = seq_len;
    c.heads = 1;
    c.formats = "f32,bf16";
    Result<BenchKvCacheReport> r = RunBenchKvCache(c);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->rows.size(), 3u);
    EXPECT_EQ(r->rows[1].format, "f32");
    EXPECT_EQ(r->rows[1].max_abs_error, 0.0);  // f16 -> f32 -> f16 is exact
    EXPECT_EQ(r->rows[1].memory_bytes, 2ull * 2 * seq_len * 128 * 4);
    EXPECT_GT(r->rows[2].max_abs_error, 0.0);  // bf16 drops mantissa bits of f16 data
  }
}

// Token-grouped K formats (chan) run in whole groups of G tokens x heads rows, a partial last
// group included (96 tokens: a group of 64 and half of one), on 3 threads: the round trip's
// error is the format's (within a step of each channel's range), not garbage from misplaced
// groups.
TEST(BenchKvCache, TokenGroupedFormatsRunInWholeGroups) {
  BenchKvCacheConfig c = Small();
  c.dtype = DType::kF32;
  c.formats = "chan4g64,chan4g32";
  Result<BenchKvCacheReport> r = RunBenchKvCache(c);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->rows.size(), 3u);
  const uint64_t values = 2ull * 2 * 96 * 4 * 128;
  EXPECT_EQ(r->rows[1].format, "chan4g64");
  EXPECT_EQ(r->rows[1].memory_bytes, values * 9 / 16);  // 4 bits + f16 scale and min per 64 tokens
  EXPECT_EQ(r->rows[2].format, "chan4g32");
  EXPECT_EQ(r->rows[2].memory_bytes, values * 5 / 8);
  for (size_t i = 1; i < 3; ++i) {
    // Standard-normal data: a channel's 32..64 values span ~4.5-5 sigma, 15 steps of ~0.33:
    // mean error about a quarter step, max half a step (+ f16 rounding).
    EXPECT_GT(r->rows[i].mean_abs_error, 0.03) << r->rows[i].format;
    EXPECT_LT(r->rows[i].mean_abs_error, 0.12) << r->rows[i].format;
    EXPECT_LT(r->rows[i].max_abs_error, 0.3) << r->rows[i].format;
    EXPECT_GT(r->rows[i].quantize_gbps, 0.0);
  }
}

TEST(BenchKvCache, JsonHasTheDocumentedShape) {
  BenchKvCacheConfig c = Small();
  Result<BenchKvCacheReport> r = RunBenchKvCache(c);
  ASSERT_TRUE(r.ok());
  const nlohmann::json j = nlohmann::json::parse(FormatBenchKvCacheJson(*r));
  EXPECT_EQ(j["config"]["layers"], 2);
  EXPECT_EQ(j["config"]["group_size"], 64);
  EXPECT_EQ(j["config"]["dtype"], "f16");
  EXPECT_GT(j["memcpy_gbps"].get<double>(), 0.0);
  EXPECT_GT(j["peak_rss_bytes"].get<uint64_t>(), 0u);
  ASSERT_EQ(j["rows"].size(), 5u);
  const std::array<const char*, 5> names = {"f16", "affine8g64", "affine4g64", "q8_0", "q4_0"};
  for (size_t i = 0; i < names.size(); ++i) {
    const auto& row = j["rows"][i];
    EXPECT_EQ(row["format"], names[i]);
    for (const char* key : {"bits_per_value", "memory_bytes", "compression", "mean_abs_error",
                            "max_abs_error", "quantize_ms", "dequantize_ms", "quantize_gbps",
                            "dequantize_gbps"}) {
      EXPECT_TRUE(row.contains(key)) << key;
    }
  }
  EXPECT_EQ(j["rows"][0]["mean_abs_error"], 0.0);
  const std::string table = FormatBenchKvCacheTable(*r);
  EXPECT_NE(table.find("affine4g64"), std::string::npos);
  EXPECT_NE(table.find("peak RSS"), std::string::npos);
}

TEST(BenchKvCache, BadConfigsNameTheFlag) {
  struct Case {
    void (*mutate)(BenchKvCacheConfig&);
    const char* expect;
  };
  const Case cases[] = {
      {[](BenchKvCacheConfig& c) { c.layers = 0; }, "--layers: expected a positive integer, got 0"},
      {[](BenchKvCacheConfig& c) { c.seq_len = -3; }, "--seq-len"},
      {[](BenchKvCacheConfig& c) { c.group_size = 48; }, "--group-size: expected 32, 64 or 128, got 48"},
      {[](BenchKvCacheConfig& c) { c.formats = "affine4,int3"; }, "unknown KV format 'int3'"},
      {[](BenchKvCacheConfig& c) { c.head_dim = 80; }, "--head-dim: head_dim 80"},
      {[](BenchKvCacheConfig& c) { c.formats = " , "; }, "--kv-type: no format"},
      {[](BenchKvCacheConfig& c) { c.threads = -1; }, "--threads"},
  };
  for (const Case& k : cases) {
    BenchKvCacheConfig c = Small();
    k.mutate(c);
    Result<BenchKvCacheReport> r = RunBenchKvCache(c);
    ASSERT_FALSE(r.ok()) << k.expect;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(k.expect), std::string::npos) << r.status().message();
  }
}

TEST(BenchKvCache, ImpossibleSizesAreRefusedNotCrashed) {
  BenchKvCacheConfig c = Small();
  c.seq_len = 2000000000;
  c.heads = 1000000;
  Result<BenchKvCacheReport> r = RunBenchKvCache(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("GiB for one tensor's buffers; this machine has"),
            std::string::npos)
      << r.status().message();
}

using testing::RunKvtierBench;  // the real binary: exit status, stdout + stderr

TEST(BenchKvCacheBinary, RunsAndRejectsBadInput) {
  std::string out;
  ASSERT_EQ(RunKvtierBench("kv-cache --layers 1 --seq-len 16 --heads 2 --json --repeats 1", &out), 0)
      << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["rows"].size(), 5u);
  out.clear();
  EXPECT_EQ(RunKvtierBench("kv-cache --kv-type affine9", &out), 2);
  EXPECT_NE(out.find("valid formats are"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(RunKvtierBench("kv-cache --dtype f64", &out), 2);
  EXPECT_NE(out.find("--dtype: unknown dtype 'f64'"), std::string::npos) << out;
  out.clear();
  EXPECT_NE(RunKvtierBench("kv-cache --layers abc", &out), 0);
  EXPECT_NE(out.find("--layers"), std::string::npos) << out;
  out.clear();
  EXPECT_NE(RunKvtierBench("no-such-command", &out), 0);
}

}  // namespace
}  // namespace kvtier::cli
