// Google Benchmark: the SSD tier's per-block costs without a disk in the way: encoding a pool
// block into its block file (header + rows + CRC-32C), decoding a header, verifying and copying
// the rows back into a pool block, and SsdTier::Load of one block from the in-memory Env and
// from the real filesystem (a file in the page cache). One Qwen3-0.6B-shaped block (28 layers
// x 8 KV heads x head_dim 128, 32 tokens: 3.5 MiB in f16, 1.86 MiB in q8_0) per format;
// `kvtier-bench ssd` measures whole spills and reloads against the disk. Single-threaded.
#include <benchmark/benchmark.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <random>
#include <vector>

#include "base/half.h"
#include "micro_formats.h"
#include "kvtier/env.h"
#include "kvtier/prefix_cache.h"
#include "kvtier/sequence_cache.h"
#include "kvtier/ssd_tier.h"
#include "tier/block_file.h"

namespace {

using kvtier::BlockPool;
using kvtier::Format;
using kvtier::bench::FormatArg;

const kvtier::KvShape kShape{28, 8, 128};
const kvtier::ModelFingerprint kModel{0x55d, 0xb10c};
constexpr uint32_t kBt = 32;

std::shared_ptr<BlockPool> Pool(Format f) {
  kvtier::BlockPoolOptions o;
  o.shape = kShape;
  o.k_format = f;
  o.v_format = f;
  o.block_tokens = kBt;
  o.capacity_bytes = 8ull * kvtier::KvBytesPerToken(kShape, f, f) * kBt + (16u << 20);
  return *BlockPool::Create(o);
}

std::vector<int32_t> Tokens() {
  std::vector<int32_t> t(kBt);
  for (uint32_t i = 0; i < kBt; ++i) t[i] = static_cast<int32_t>(1000 + 7 * i);
  return t;
}

// One full block of random normal K/V (quantized into the pool's format).
kvtier::SequenceCache Filled(const std::shared_ptr<BlockPool>& pool) {
  std::vector<uint16_t> src(size_t(kBt) * kShape.n_kv_heads * kShape.head_dim);  // [32, 8, 128]
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (auto& x : src) x = kvtier::F32ToF16(nd(rng));
  kvtier::SequenceCache s(pool);
  for (uint32_t l = 0; l < kShape.n_layers; ++l) {
    (void)s.Append(l, kvtier::DType::kF16, src.data(), src.data(), kBt);
  }
  return s;
}

kvtier::tier::BlockFileHeader Header(Format f) {
  kvtier::tier::BlockFileHeader h;
  h.tokens = Tokens();
  h.namespace_key = kvtier::NamespaceKey(kModel, kShape, f, f, kBt);
  h.parent_key = h.namespace_key;
  h.key = kvtier::ChainBlockKey(h.parent_key, h.tokens);
  h.model = kModel;
  h.shape = kShape;
  h.k_format = f;
  h.v_format = f;
  h.block_tokens = kBt;
  h.ends = {kBt};
  return h;
}

void BM_EncodeBlockFile(benchmark::State& state) {
  const Format f = FormatArg(state.range(0));
  auto pool = Pool(f);
  kvtier::SequenceCache s = Filled(pool);
  const kvtier::tier::BlockFileHeader h = Header(f);
  for (auto _ : state) {
    auto bytes = kvtier::tier::EncodeBlockFile(h, *pool, s.block_ids()[0]);
    benchmark::DoNotOptimize(bytes->data());
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(h.file_bytes()));
  state.SetLabel(f.name());
}

void BM_DecodeBlockHeader(benchmark::State& state) {
  const Format f = FormatArg(state.range(0));
  auto pool = Pool(f);
  kvtier::SequenceCache s = Filled(pool);
  const kvtier::tier::BlockFileHeader h = Header(f);
  const std::vector<uint8_t> file = *kvtier::tier::EncodeBlockFile(h, *pool, s.block_ids()[0]);
  for (auto _ : state) {
    auto got = kvtier::tier::DecodeBlockHeader(
        std::span<const uint8_t>(file.data(), h.header_bytes()), file.size(), "bench");
    benchmark::DoNotOptimize(got->tokens.data());
  }
  state.SetLabel(f.name());
}

void BM_DecodeBlockRows(benchmark::State& state) {
  const Format f = FormatArg(state.range(0));
  auto pool = Pool(f);
  kvtier::SequenceCache s = Filled(pool);
  const kvtier::tier::BlockFileHeader h = Header(f);
  const std::vector<uint8_t> file = *kvtier::tier::EncodeBlockFile(h, *pool, s.block_ids()[0]);
  std::vector<kvtier::BlockId> dst;
  (void)pool->Allocate(1, kvtier::KvOwner::kTier, &dst, "bench");
  for (auto _ : state) {
    kvtier::Status st = kvtier::tier::DecodeBlockRows(h, file, *pool, dst[0], "bench");
    benchmark::DoNotOptimize(st);
  }
  pool->Unref(dst, kvtier::KvOwner::kTier);
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(file.size()));
  state.SetLabel(f.name());
}

// SsdTier::Load of one spilled block; range(1): 0 = in-memory Env, 1 = the real filesystem
// under /tmp (the file stays in the page cache).
void BM_SsdTierLoad(benchmark::State& state) {
  const Format f = FormatArg(state.range(0));
  const bool posix = state.range(1) != 0;
  std::unique_ptr<kvtier::MemEnv> mem = kvtier::MemEnv::Create(1);
  std::string dir = "/ssd";
  if (posix) {
    std::string t = "/tmp/kvtier-bench-ssd-XXXXXX";
    if (mkdtemp(t.data()) == nullptr) {
      state.SkipWithError("mkdtemp failed");
      return;
    }
    dir = t;
  }
  auto pool = Pool(f);
  uint64_t file_bytes = 0;
  {
    kvtier::SsdTierOptions o;
    o.dir = dir;
    o.env = posix ? kvtier::Env::Default() : mem.get();
    auto tier = *kvtier::SsdTier::Open(std::move(o));
    kvtier::PrefixCacheOptions po;
    po.memory_budget_bytes = 4 * pool->layout().block_stride;
    po.lower_tier = tier;
    auto cache = kvtier::PrefixCache::Create(std::move(po)).value();
    const std::vector<int32_t> t = Tokens();
    (void)cache->Store(kModel, t, Filled(pool));
    cache->Evict(UINT64_MAX);
    tier->Flush();
    cache.reset();
    const kvtier::TierNamespace ns = tier->Namespaces(kModel).at(0);
    const kvtier::BlockKey key = tier->FindChain(ns, t).at(0).key;
    file_bytes = tier->Stats().bytes;
    std::vector<kvtier::BlockId> dst;
    (void)pool->Allocate(1, kvtier::KvOwner::kTier, &dst, "bench");
    for (auto _ : state) {
      kvtier::Status st = tier->Load(ns, key, *pool, dst[0]);
      if (!st.ok()) state.SkipWithError(st.ToString().c_str());
    }
    pool->Unref(dst, kvtier::KvOwner::kTier);
  }
  if (posix) std::filesystem::remove_all(dir);
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(file_bytes));
  state.SetLabel(f.name() + (posix ? " posix" : " memenv"));
}

// FormatArg indices: 0 f16, 1 q8_0, 2 q4_0.
void Formats(benchmark::internal::Benchmark* b) {
  for (int f : {0, 1, 2}) b->Arg(f);
}

void LoadArgs(benchmark::internal::Benchmark* b) {
  for (int f : {0, 1}) {
    for (int posix : {0, 1}) b->Args({f, posix});
  }
}

}  // namespace

namespace kvtier::bench {

void RegisterMicroSsd() {
  benchmark::RegisterBenchmark("BM_EncodeBlockFile", BM_EncodeBlockFile)
      ->Apply(Formats)
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("BM_DecodeBlockHeader", BM_DecodeBlockHeader)
      ->Apply(Formats)
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("BM_DecodeBlockRows", BM_DecodeBlockRows)
      ->Apply(Formats)
      ->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("BM_SsdTierLoad", BM_SsdTierLoad)
      ->Apply(LoadArgs)
      ->Unit(benchmark::kMicrosecond);
}

}  // namespace kvtier::bench
