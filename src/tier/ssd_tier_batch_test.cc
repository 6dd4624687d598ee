// SsdTier's group commit (SsdTierOptions::batch_blocks): a batch's files are all synced before
// any is renamed and its directories are synced once after; crashes between those steps,
// ENOSPC and failed syncs inside a batch lose only unacknowledged blocks, and every block a
// restart serves holds exactly the rows written.
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>

#include "kvtier/ssd_tier.h"
#include "tier/tier_test_util.h"

namespace kvtier {
namespace {

using testing::FetchChecked;
using testing::IndexedTokens;
using testing::MakeRig;
using testing::Range;
using testing::Rig;
using testing::StoreAndSpill;
using testing::TierOptions;
using Op = FaultInjectionEnv::Op;
using Fault = FaultInjectionEnv::Fault;

std::vector<std::vector<int32_t>> Entries(int n, int32_t base, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(Range(base + 100 * i, 6 + static_cast<int32_t>(rng() % 14)));
  }
  return out;
}

// No temporary file is left under /ssd/blocks; returns the block files there.
size_t BlockFilesAndNoTmp(MemEnv& mem) {
  size_t n = 0;
  Result<std::vector<DirEntry>> subs = mem.ListDir("/ssd/blocks");
  EXPECT_TRUE(subs.ok());
  if (!subs.ok()) return 0;
  for (const DirEntry& d : *subs) {
    Result<std::vector<DirEntry>> files = mem.ListDir("/ssd/blocks/" + d.name);
    EXPECT_TRUE(files.ok());
    if (!files.ok()) continue;
    for (const DirEntry& f : *files) {
      EXPECT_EQ(f.name.find(".tmp"), std::string::npos) << f.name;
      ++n;
    }
  }
  return n;
}

TEST(SsdTierBatch, EveryFileIsSyncedBeforeAnyRenameAndEachDirectoryOnce) {
  std::unique_ptr<MemEnv> mem = MemEnv::Create(1);
  std::unique_ptr<FaultInjectionEnv> env = FaultInjectionEnv::Create(mem.get());
  SsdTierOptions o = TierOptions(env.get(), 1ull << 30, 64);
  o.writer_threads = 1;
  o.batch_blocks = 6;
  Rig r = MakeRig(o, Format::Q8_0(), Format::F16(), 64);
  ASSERT_NE(r.tier, nullptr);
  std::mutex mu;
  std::vector<std::pair<Op, std::string>> log;
  std::atomic<bool> go{false};
  env->SetRule([&](Op op, uint64_t, const std::string& path) {
    // The writer's first file waits until every block is queued: later batches are full.
    while (op == Op::kOpenWrite && !go.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::lock_guard<std::mutex> lock(mu);
    if (op == Op::kOpenWrite || op == Op::kSync || op == Op::kRename || op == Op::kSyncDir) {
      log.emplace_back(op, path);
    }
    return Fault::kNone;
  });
  const std::vector<std::vector<int32_t>> entries = Entries(6, 0, 2);
  for (const auto& t : entries) {
    ASSERT_TRUE(r.cache->Store(testing::kModelA, t, testing::SeqOf(r.pool, t)).ok());
  }
  r.cache->Evict(UINT64_MAX);
  go = true;
  r.tier->Flush();
  const uint64_t blocks = r.tier->Stats().spilled_blocks;
  ASSERT_GT(blocks, 12u);
  // The log is a run of batches: opens, then as many syncs, renames, then directory syncs.
  size_t i = 0, batches = 0, largest = 0, dir_syncs = 0;
  while (i < log.size()) {
    size_t opens = 0, syncs = 0, renames = 0, dirs = 0;
    while (i < log.size() && log[i].first == Op::kOpenWrite) ++opens, ++i;
    while (i < log.size() && log[i].first == Op::kSync) ++syncs, ++i;
    while (i < log.size() && log[i].first == Op::kRename) ++renames, ++i;
    while (i < log.size() && log[i].first == Op::kSyncDir) ++dirs, ++i;
    ASSERT_GT(opens, 0u) << "op " << i;
    EXPECT_EQ(syncs, opens);
    EXPECT_EQ(renames, opens);
    EXPECT_GE(dirs, 1u);
    EXPECT_LE(dirs, renames);
    ++batches;
    largest = std::max(largest, opens);
    dir_syncs += dirs;
  }
  EXPECT_EQ(largest, 6u);
  EXPECT_LT(batches, blocks);
  EXPECT_LE(dir_syncs, blocks);
  env->SetRule(nullptr);
  for (const auto& t : entries) EXPECT_EQ(FetchChecked(r, t), t.size() - 1);
}

// A crash at the n-th operation `at` of the second spill (after the first was acknowledged):
// between a batch's writes and syncs, its syncs and renames, its renames and directory syncs.
TEST(SsdTierBatch, CrashesBetweenTheStepsOfABatchLoseNoAcknowledgedBlock) {
  const std::vector<std::vector<int32_t>> first = Entries(4, 0, 3), second = Entries(6, 5000, 4);
  int trial = 0;
  for (Op at : {Op::kAppend, Op::kSync, Op::kRename, Op::kSyncDir}) {
    for (int nth = 1; nth <= 7; nth += 2, ++trial) {
      std::unique_ptr<MemEnv> mem = MemEnv::Create(trial);
      std::unique_ptr<FaultInjectionEnv> env = FaultInjectionEnv::Create(mem.get());
      SsdTierOptions o = TierOptions(env.get(), 1ull << 30, 64);
      o.writer_threads = 1 + trial % 3;
      o.batch_blocks = 8;
      std::vector<uint32_t> acked;
      std::atomic<int> seen{0};
      {
        Rig r = MakeRig(o, Format::Q8_0(), Format::BF16(), 64);
        ASSERT_NE(r.tier, nullptr);
        StoreAndSpill(r, first);
        env->SetRule([&](Op op, uint64_t, const std::string&) {
          return op == at && seen.fetch_add(1) + 1 == nth ? Fault::kCrash : Fault::kNone;
        });
        StoreAndSpill(r, second);
        EXPECT_TRUE(env->crashed());
        for (const auto& t : first) EXPECT_EQ(IndexedTokens(*r.tier, t), t.size());
        for (const auto& t : second) acked.push_back(IndexedTokens(*r.tier, t));
      }
      env->Restart(static_cast<MemEnv::CrashMode>(trial % 3));
      env->SetRule(nullptr);
      Rig r = MakeRig(o, Format::Q8_0(), Format::BF16(), 64);
      ASSERT_NE(r.tier, nullptr);
      for (const auto& t : first) EXPECT_EQ(FetchChecked(r, t), t.size() - 1);
      for (size_t i = 0; i < second.size(); ++i) {
        EXPECT_GE(FetchChecked(r, second[i]), std::min<uint32_t>(acked[i], second[i].size() - 1))
            << "op " << static_cast<int>(at) << " #" << nth;
      }
      EXPECT_EQ(r.tier->Stats().quarantined, 0u);  // nothing torn was ever renamed
      BlockFilesAndNoTmp(*mem);
    }
  }
}

// Random crash points and batch settings: every acknowledged block survives, every block
// served holds exactly the rows written.
TEST(SsdTierBatch, RandomCrashPointsKeepEveryAcknowledgedBlock) {
  std::mt19937_64 rng(77);
  const std::vector<std::vector<int32_t>> entries = Entries(8, 0, 5);
  uint64_t crashes = 0, acked_total = 0;
  for (int trial = 0; trial < 150; ++trial) {
    std::unique_ptr<MemEnv> mem = MemEnv::Create(1000 + trial);
    std::unique_ptr<FaultInjectionEnv> env = FaultInjectionEnv::Create(mem.get());
    SsdTierOptions o = TierOptions(env.get(), 1ull << 30, 1 + static_cast<uint32_t>(rng() % 32));
    o.writer_threads = 1 + static_cast<uint32_t>(rng() % 4);
    o.batch_blocks = 1 + static_cast<uint32_t>(rng() % 10);
    const uint64_t crash_at = 4 + rng() % 200;
    env->SetRule([crash_at](Op, uint64_t i, const std::string&) {
      return i == crash_at ? Fault::kCrash : Fault::kNone;
    });
    std::vector<uint32_t> acked;
    {
      Rig r = MakeRig(o, Format::Q4_0(), Format::F16(), 64);
      if (r.tier == nullptr) continue;  // crashed while opening
      StoreAndSpill(r, entries);
      for (const auto& t : entries) acked.push_back(IndexedTokens(*r.tier, t));
    }
    crashes += env->crashed();
    env->Restart(static_cast<MemEnv::CrashMode>(trial % 3));
    env->SetRule(nullptr);
    Rig r = MakeRig(o, Format::Q4_0(), Format::F16(), 64);
    ASSERT_NE(r.tier, nullptr);
    for (size_t i = 0; i < entries.size(); ++i) {
      acked_total += acked[i];
      EXPECT_GE(FetchChecked(r, entries[i]), std::min<uint32_t>(acked[i], entries[i].size() - 1))
          << "trial " << trial;
    }
    BlockFilesAndNoTmp(*mem);
  }
  EXPECT_GT(crashes, 100u);
  EXPECT_GT(acked_total, 0u);
}

TEST(SsdTierBatch, DiskFullInTheMiddleOfABatchSkipsOnlyWhatDoesNotFit) {
  for (uint32_t threads : {1u, 3u}) {
    std::unique_ptr<MemEnv> mem = MemEnv::Create(20 + threads);
    SsdTierOptions o = TierOptions(mem.get(), 1ull << 30, 64);
    o.writer_threads = threads;
    o.batch_blocks = 8;
    Rig r = MakeRig(o, Format::F16(), Format::F16(), 64);
    ASSERT_NE(r.tier, nullptr);
    const uint64_t cap = mem->TotalBytes() + 7 * 4300;  // room for about six f16 block files
    mem->SetCapacity(cap);
    const std::vector<std::vector<int32_t>> entries = Entries(5, 0, 6);
    StoreAndSpill(r, entries);
    const SsdTierStats s = r.tier->Stats();
    const uint64_t full = s.skipped[static_cast<int>(SpillSkip::kDiskFull)];
    EXPECT_GT(full, 0u);
    EXPECT_GT(s.spilled_blocks, 0u);
    EXPECT_EQ(s.skipped[static_cast<int>(SpillSkip::kIoError)], 0u);
    uint64_t total = 0;
    for (const auto& t : entries) total += (t.size() + testing::kTierBt - 1) / testing::kTierBt;
    EXPECT_EQ(s.spilled_blocks + full, total);
    EXPECT_LE(mem->TotalBytes(), cap);
    EXPECT_EQ(BlockFilesAndNoTmp(*mem), s.spilled_blocks);
    std::vector<uint32_t> acked;
    for (const auto& t : entries) acked.push_back(IndexedTokens(*r.tier, t));
    r = Rig{};
    mem->SimulateCrash(MemEnv::CrashMode::kDropUnsynced);
    r = MakeRig(o, Format::F16(), Format::F16(), 64);
    ASSERT_NE(r.tier, nullptr);
    EXPECT_EQ(r.tier->Stats().found_blocks, s.spilled_blocks);  // every acknowledged block
    for (size_t i = 0; i < entries.size(); ++i) {
      EXPECT_GE(FetchChecked(r, entries[i]), std::min<uint32_t>(acked[i], entries[i].size() - 1));
    }
  }
}

// Injected ENOSPC on one append, EIO on one file sync and on one directory sync, each inside a
// batch: only the blocks concerned are skipped, counted by reason, and leave no file behind.
TEST(SsdTierBatch, AFailedStepSkipsOnlyItsBlocks) {
  struct Case {
    Op op;
    Fault fault;
    SpillSkip reason;
  };
  for (const Case& c : {Case{Op::kAppend, Fault::kEnospc, SpillSkip::kDiskFull},
                        Case{Op::kSync, Fault::kEio, SpillSkip::kIoError},
                        Case{Op::kRename, Fault::kEio, SpillSkip::kIoError},
                        Case{Op::kSyncDir, Fault::kEio, SpillSkip::kIoError}}) {
    std::unique_ptr<MemEnv> mem = MemEnv::Create(30);
    std::unique_ptr<FaultInjectionEnv> env = FaultInjectionEnv::Create(mem.get());
    SsdTierOptions o = TierOptions(env.get(), 1ull << 30, 64);
    o.writer_threads = 1;
    o.batch_blocks = 8;
    Rig r = MakeRig(o, Format::BF16(), Format::Q8_0(), 64);
    ASSERT_NE(r.tier, nullptr);
    std::atomic<int> seen{0};
    env->SetRule([&](Op op, uint64_t, const std::string&) {
      return op == c.op && ++seen == 3 ? c.fault : Fault::kNone;
    });
    const std::vector<std::vector<int32_t>> entries = Entries(4, 0, 7);
    StoreAndSpill(r, entries);
    const SsdTierStats s = r.tier->Stats();
    const uint64_t skipped = s.skipped[static_cast<int>(c.reason)];
    EXPECT_GE(skipped, 1u) << static_cast<int>(c.op);
    if (c.op != Op::kSyncDir) {
      EXPECT_EQ(skipped, 1u);  // (a directory may hold several blocks)
    }
    EXPECT_EQ(s.skipped[0] + s.skipped[1] + s.skipped[2], skipped);
    EXPECT_EQ(BlockFilesAndNoTmp(*mem), s.spilled_blocks);
    env->SetRule(nullptr);
    for (const auto& t : entries) FetchChecked(r, t);
    r = Rig{};
    r = MakeRig(o, Format::BF16(), Format::Q8_0(), 64);
    EXPECT_EQ(r.tier->Stats().found_blocks, s.spilled_blocks);
  }
}

TEST(SsdTierBatch, BadBatchOptionsAreRejected) {
  std::unique_ptr<MemEnv> mem = MemEnv::Create(40);
  SsdTierOptions o = TierOptions(mem.get());
  o.batch_blocks = 0;
  EXPECT_EQ(SsdTier::Open(o).status().code(), StatusCode::kInvalidArgument);
  o.batch_blocks = 4;
  o.batch_bytes = 0;
  EXPECT_EQ(SsdTier::Open(o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier
