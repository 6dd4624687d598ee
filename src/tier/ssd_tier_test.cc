// SsdTier under the prefix cache, on the in-memory Env: spill and promote every format bit for
// bit, restart, the size cap, quarantine, random crash points, ENOSPC and injected I/O errors.
#include "kvtier/ssd_tier.h"

#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "tier/tier_test_util.h"

namespace kvtier {
namespace {

using testing::kModelA;
using testing::MakePool;
using testing::Range;
using testing::SeqOf;

using testing::FetchChecked;
using testing::MakeRig;
using testing::OpenTier;
using testing::Rig;
using testing::StoreAndSpill;

constexpr KvShape kShape = testing::kTierShape;
constexpr uint32_t kBt = testing::kTierBt;

const std::vector<std::vector<int32_t>> kEntries = {Range(1, 19), Range(500, 13),
                                                    testing::Concat(Range(1, 8), {9, 9, 9})};

TEST(SsdTier, SpillsAndPromotesEveryFormatBitForBit) {
  std::vector<std::pair<Format, Format>> mixes = {
      {Format::Q8_0(), Format::Q4_0()},
      {Format::BF16(), Format::Affine(4, 64, DType::kF16)},
      {Format::Affine(8, 32, DType::kBF16), Format::F32()},
  };
  for (const Format& f : AllSupportedFormats()) {
    if (f.CheckHeadDim(kShape.head_dim).ok()) mixes.emplace_back(f, f);
  }
  ASSERT_GT(mixes.size(), 40u);
  for (const auto& [k, v] : mixes) {
    std::unique_ptr<MemEnv> env = MemEnv::Create(1);
    Rig r = MakeRig(env.get(), k, v, 16);
    StoreAndSpill(r, kEntries);
    ASSERT_EQ(r.cache->Stats().nodes, 0u);
    const SsdTierStats s = r.tier->Stats();
    EXPECT_EQ(s.spilled_blocks, 10u);  // 5 + 4 + 1 (the third shares its first two blocks)
    EXPECT_EQ(s.blocks, 10u);
    for (const auto& t : kEntries) {
      EXPECT_EQ(FetchChecked(r, t), t.size() - 1) << k.spec() << "/" << v.spec();
    }
    EXPECT_EQ(r.cache->Stats().promoted_blocks, 10u);
    EXPECT_EQ(r.tier->Stats().loaded_blocks, 10u);
  }
}

TEST(SsdTier, ARestartFindsEveryBlock) {
  std::unique_ptr<MemEnv> env = MemEnv::Create(2);
  {
    Rig r = MakeRig(env.get(), Format::Q8_0(), Format::Q4_0(), 16);
    StoreAndSpill(r, kEntries);
  }
  env->SimulateCrash(MemEnv::CrashMode::kTornGarbage);  // everything was synced: nothing lost
  Rig r = MakeRig(env.get(), Format::Q8_0(), Format::Q4_0(), 16);
  EXPECT_EQ(r.tier->Stats().found_blocks, 10u);
  for (const auto& t : kEntries) EXPECT_EQ(FetchChecked(r, t), t.size() - 1);
  // A longer request after a restart: the tier's chain is a prefix of it.
  EXPECT_EQ(FetchChecked(r, Range(1, 25)), 19u);
}

TEST(SsdTier, TheCapIsNeverPassedAndOldBlocksGoFirst) {
  std::unique_ptr<MemEnv> env = MemEnv::Create(3);
  Rig probe = MakeRig(env.get(), Format::F16(), Format::F16(), 16);
  StoreAndSpill(probe, {Range(1, 4)});
  const uint64_t file = probe.tier->Stats().bytes;
  probe = Rig{};
  std::unique_ptr<MemEnv> env2 = MemEnv::Create(4);
  Rig r = MakeRig(env2.get(), Format::F16(), Format::F16(), 16, 5 * file);
  for (int32_t i = 0; i < 6; ++i) {
    StoreAndSpill(r, {Range(1000 * (i + 1), 8)});  // two blocks each
    EXPECT_LE(r.tier->Stats().bytes, 5 * file);
  }
  const SsdTierStats s = r.tier->Stats();
  EXPECT_EQ(s.blocks, 5u);
  EXPECT_EQ(s.evicted_blocks, 7u);
  EXPECT_LE(env2->TotalBytes(), 5 * file);
  EXPECT_EQ(FetchChecked(r, Range(1000, 9)), 0u);   // the oldest went first
  EXPECT_EQ(FetchChecked(r, Range(6000, 9)), 8u);   // the newest is there
  // A cap smaller than what is on disk: Open() evicts down to it.
  r = Rig{};
  Result<std::shared_ptr<SsdTier>> t = OpenTier(env2.get(), 2 * file);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->Stats().blocks, 2u);
  EXPECT_LE(env2->TotalBytes(), 2 * file);
}

TEST(SsdTier, ACorruptFileIsQuarantinedAndNeverUsed) {
  std::unique_ptr<MemEnv> env = MemEnv::Create(5);
  SsdTierOptions o = testing::TierOptions(env.get());
  o.layout = SsdLayout::kBlockFiles;  // version-1 files (a segment's: ssd_tier_segment_test.cc)
  Rig r = MakeRig(o, Format::Q4_0(), Format::Q4_0(), 16);
  ASSERT_NE(r.tier, nullptr);
  StoreAndSpill(r, {Range(1, 12)});
  // Flip one payload bit of the second block's file.
  const BlockKey ns = NamespaceKey(kModelA, kShape, Format::Q4_0(), Format::Q4_0(), kBt);
  const std::vector<int32_t> t = Range(1, 12);
  const BlockKey b0 = ChainBlockKey(ns, std::span<const int32_t>(t).first(4));
  const BlockKey b1 = ChainBlockKey(b0, std::span<const int32_t>(t).subspan(4, 4));
  char sub[4];
  std::snprintf(sub, sizeof sub, "%02x", static_cast<unsigned>(b1.hi >> 56));
  const std::string path = std::string("/ssd/blocks/") + sub + "/" + b1.ToHex() + ".kvb";
  Result<std::vector<uint8_t>> bytes = env->ReadFile(path);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  (*bytes)[bytes->size() - 40] ^= 0x04;
  ASSERT_TRUE(env->WriteFileDurably(path, *bytes).ok());
  EXPECT_EQ(FetchChecked(r, t), 4u);  // only the block before the damaged one
  EXPECT_EQ(r.tier->Stats().quarantined, 1u);
  EXPECT_FALSE(env->FileExists(path));
  EXPECT_TRUE(env->FileExists("/ssd/quarantine/" + b1.ToHex() + ".kvb"));
  EXPECT_EQ(r.cache->Stats().promote_failures, 1u);
}

// Crash anywhere during heavy spilling; after the restart every block the tier serves holds
// exactly the rows that were written, and no temporary file is left.
TEST(SsdTier, RandomCrashPointsNeverServeDamagedBlocks) {
  std::mt19937_64 rng(42);
  std::vector<std::vector<int32_t>> entries;
  for (int i = 0; i < 8; ++i) entries.push_back(Range(100 * i, 6 + static_cast<int32_t>(rng() % 14)));
  uint64_t served = 0, crashes = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::unique_ptr<MemEnv> mem = MemEnv::Create(trial);
    std::unique_ptr<FaultInjectionEnv> env = FaultInjectionEnv::Create(mem.get());
    // Both layouts; segments take fewer operations for the same blocks.
    SsdTierOptions o = testing::TierOptions(env.get());
    o.layout = trial % 2 == 0 ? SsdLayout::kSegments : SsdLayout::kBlockFiles;
    const uint64_t crash_at = 4 + rng() % (o.layout == SsdLayout::kSegments ? 50 : 160);
    env->SetRule([crash_at](FaultInjectionEnv::Op, uint64_t i, const std::string&) {
      return i == crash_at ? FaultInjectionEnv::Fault::kCrash : FaultInjectionEnv::Fault::kNone;
    });
    {
      Rig r = MakeRig(o, Format::Q8_0(), Format::BF16(), 64);
      if (r.tier == nullptr) continue;  // crashed while opening
      StoreAndSpill(r, entries);
    }
    crashes += env->crashed();
    env->Restart(static_cast<MemEnv::CrashMode>(trial % 3));
    env->SetRule(nullptr);
    Rig r = MakeRig(o, Format::Q8_0(), Format::BF16(), 64);
    ASSERT_NE(r.tier, nullptr) << "trial " << trial;
    for (const auto& t : entries) served += FetchChecked(r, t);
    Result<std::vector<DirEntry>> subs = mem->ListDir("/ssd/blocks");
    ASSERT_TRUE(subs.ok());
    for (const DirEntry& d : *subs) {
      Result<std::vector<DirEntry>> files = mem->ListDir("/ssd/blocks/" + d.name);
      ASSERT_TRUE(files.ok());
      for (const DirEntry& f : *files) {
        EXPECT_EQ(f.name.find(".tmp"), std::string::npos) << f.name;
      }
    }
  }
  EXPECT_GT(served, 0u);
  EXPECT_GT(crashes, 150u);  // the crash points fell inside the work
}

TEST(SsdTier, OtherModelsAndNewerFilesFollowThePolicy) {
  std::unique_ptr<MemEnv> env = MemEnv::Create(10);
  Rig r = MakeRig(env.get(), Format::F16(), Format::F16(), 16);
  StoreAndSpill(r, {Range(1, 8)});  // two blocks of model A
  r = Rig{};
  // A file of a newer version (its header says version 3) is left alone, not quarantined.
  const std::string newer = "/ssd/blocks/00/" + std::string(32, '0') + ".kvb";
  std::vector<uint8_t> bytes(256, 0);
  const char magic[8] = {'K', 'V', 'T', 'B', 'L', 'K', 0x1A, '\n'};
  std::memcpy(bytes.data(), magic, 8);
  bytes[8] = 3;
  ASSERT_TRUE(env->CreateDirs("/ssd/blocks/00").ok());
  ASSERT_TRUE(env->WriteFileDurably(newer, bytes).ok());
  Result<std::shared_ptr<SsdTier>> t = OpenTier(env.get());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->Stats().ignored_newer, 1u);
  EXPECT_EQ((*t)->Stats().quarantined, 0u);
  EXPECT_EQ((*t)->Stats().found_blocks, 2u);
  EXPECT_TRUE(env->FileExists(newer));
  t->reset();
  // Keeping only model B removes model A's files at open.
  SsdTierOptions o;
  o.dir = "/ssd";
  o.env = env.get();
  o.keep_only_models = {testing::kModelB};
  Result<std::shared_ptr<SsdTier>> only_b = SsdTier::Open(o);
  ASSERT_TRUE(only_b.ok());
  EXPECT_EQ((*only_b)->Stats().removed_foreign, 2u);
  EXPECT_EQ((*only_b)->Stats().blocks, 0u);
  EXPECT_TRUE(env->FileExists(newer));
}

TEST(SsdTier, DiskFullSkipsBlocksWithoutCrashing) {
  std::unique_ptr<MemEnv> env = MemEnv::Create(6);
  Rig r = MakeRig(env.get(), Format::F16(), Format::F16(), 16);
  env->SetCapacity(env->TotalBytes() + 3 * 4200);  // room for about two f16 block files
  StoreAndSpill(r, kEntries);
  const SsdTierStats s = r.tier->Stats();
  EXPECT_GT(s.skipped[static_cast<int>(SpillSkip::kDiskFull)], 0u);
  EXPECT_EQ(s.spilled_blocks + s.skipped[static_cast<int>(SpillSkip::kDiskFull)], 10u);
  for (const auto& t : kEntries) FetchChecked(r, t);
}

TEST(SsdTier, InjectedErrorsAreCountedOrQuarantinedNeverServed) {
  std::unique_ptr<MemEnv> mem = MemEnv::Create(7);
  std::unique_ptr<FaultInjectionEnv> env = FaultInjectionEnv::Create(mem.get());
  std::mt19937_64 rng(9);
  env->SetRule([&](FaultInjectionEnv::Op op, uint64_t, const std::string&) {
    using F = FaultInjectionEnv::Fault;
    using O = FaultInjectionEnv::Op;
    if (op == O::kAppend && rng() % 5 == 0) return rng() % 2 ? F::kEio : F::kTornWrite;
    if (op == O::kSync && rng() % 7 == 0) return F::kEio;
    if (op == O::kRead && rng() % 4 == 0) return F::kBitFlip;
    return F::kNone;
  });
  Rig r = MakeRig(env.get(), Format::Affine(4, 64, DType::kF16), Format::Affine(4, 64, DType::kF16), 16);
  ASSERT_NE(r.tier, nullptr);
  std::vector<std::vector<int32_t>> entries;
  for (int i = 0; i < 10; ++i) entries.push_back(Range(50 * i, 12));
  StoreAndSpill(r, entries);
  const SsdTierStats s = r.tier->Stats();
  EXPECT_GT(s.skipped[static_cast<int>(SpillSkip::kIoError)], 0u);
  EXPECT_EQ(s.spilled_blocks + s.skipped[static_cast<int>(SpillSkip::kIoError)], 30u);
  for (const auto& t : entries) FetchChecked(r, t);
  EXPECT_GT(r.tier->Stats().quarantined, 0u);  // bit flips on read
}

TEST(SsdTier, AFullQueueMakesTheProducerWaitOrWriteInline) {
  std::unique_ptr<MemEnv> mem = MemEnv::Create(8);
  // Slow file creation: the writers fall behind the producer, whatever the layout.
  std::unique_ptr<FaultInjectionEnv> env = FaultInjectionEnv::Create(mem.get());
  env->SetRule([](FaultInjectionEnv::Op op, uint64_t, const std::string&) {
    if (op == FaultInjectionEnv::Op::kOpenWrite) {
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
    return FaultInjectionEnv::Fault::kNone;
  });
  for (bool inline_writes : {false, true}) {
    SsdTierOptions o;
    o.dir = inline_writes ? "/inline" : "/wait";
    o.env = env.get();
    o.queue_blocks = 1;
    o.write_inline_when_full = inline_writes;
    auto tier = SsdTier::Open(o).value();
    auto pool = MakePool(kShape, Format::F16(), Format::F16(), kBt, 64 << 20);
    PrefixCacheOptions po;
    po.memory_budget_bytes = 64 * pool->layout().block_stride;
    po.lower_tier = tier;
    auto cache = PrefixCache::Create(po).value();
    for (int32_t i = 0; i < 10; ++i) {
      ASSERT_TRUE(cache->Store(kModelA, Range(100 * i, 16), SeqOf(pool, Range(100 * i, 16))).ok());
    }
    cache->Evict(UINT64_MAX);
    tier->Flush();
    const SsdTierStats s = tier->Stats();
    EXPECT_EQ(s.spilled_blocks, 40u);  // none dropped
    EXPECT_EQ(s.skipped[0] + s.skipped[1] + s.skipped[2], 0u);
    if (inline_writes) {
      EXPECT_GT(s.inline_writes, 0u);
    }
  }
}

TEST(SsdTier, BadOptionsAreRejected) {
  std::unique_ptr<MemEnv> env = MemEnv::Create(9);
  SsdTierOptions o;
  o.env = env.get();
  EXPECT_EQ(SsdTier::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.dir = "/x";
  o.max_bytes = 0;
  EXPECT_EQ(SsdTier::Open(o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier
