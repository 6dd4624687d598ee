// SsdTier's group commit (SsdTierOptions::batch_blocks) of version-1 block files
// (SsdLayout::kBlockFiles; segments: ssd_tier_segment_test.cc), in both sync modes: a batch's files
// are all made durable (each fdatasynced, or one syncfs) before any is renamed, and the
// renames are made durable (each directory fsynced once, or one more syncfs) before any block
// is indexed; crashes before and after each of those steps, ENOSPC and failed syncs inside a
// batch lose only unacknowledged blocks, and every block a restart serves holds exactly the
// rows written.
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>

#include "kvtier/ssd_tier.h"
#include "tier/tier_test_util.h"

namespace kvtier {
namespace {

using testing::Entries;
using testing::FetchChecked;
using testing::IndexedTokens;
using testing::LeakDirectoryChanges;
using testing::MakeRig;
using testing::Rig;
using testing::StoreAndSpill;
using testing::TierOptions;
using Op = FaultInjectionEnv::Op;
using Fault = FaultInjectionEnv::Fault;

constexpr SsdSyncMode kModes[] = {SsdSyncMode::kPerFile, SsdSyncMode::kFilesystem};

// The tests' options in `mode`; kFilesystem syncs every batch, even of one block.
SsdTierOptions ModeOptions(Env* env, SsdSyncMode mode, uint32_t queue = 64) {
  SsdTierOptions o = TierOptions(env, 1ull << 30, queue);
  o.layout = SsdLayout::kBlockFiles;
  o.sync_mode = mode;
  o.filesystem_sync_min_blocks = 1;
  return o;
}

const char* Name(SsdSyncMode mode) { return mode == SsdSyncMode::kPerFile ? "per-file" : "syncfs"; }

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

// The operations of a writer, batch after batch: opens, then as many fdatasyncs, renames,
// directory fsyncs (per-file); or opens, one syncfs, renames, one syncfs (kFilesystem).
TEST(SsdTierBatch, EveryFileIsSyncedBeforeAnyRenameAndEveryRenameBeforeTheIndex) {
  for (SsdSyncMode mode : kModes) {
    SCOPED_TRACE(Name(mode));
    std::unique_ptr<MemEnv> mem = MemEnv::Create(1);
    std::unique_ptr<FaultInjectionEnv> env = FaultInjectionEnv::Create(mem.get());
    SsdTierOptions o = ModeOptions(env.get(), mode);
    o.writer_threads = 1;
    o.batch_blocks = 6;
    Rig r = MakeRig(o, Format::Q8_0(), Format::F16(), 64);
    ASSERT_NE(r.tier, nullptr);
    const std::vector<std::vector<int32_t>> entries = Entries(6, 0, 2);
    const std::vector<testing::OpRecord> log = testing::SpillLogged(
        r, *env, entries, [](Op op, const std::string& path, const std::vector<testing::OpRecord>& l) {
          // (An open retried after creating the file's subdirectory is logged once.)
          const bool retry = op == Op::kOpenWrite && !l.empty() && l.back().second == path;
          return !retry && (op == Op::kOpenWrite || op == Op::kSync || op == Op::kRename ||
                            op == Op::kSyncDir || op == Op::kSyncFs);
        });
    const uint64_t blocks = r.tier->Stats().spilled_blocks;
    ASSERT_GT(blocks, 12u);
    const Op data_sync = mode == SsdSyncMode::kPerFile ? Op::kSync : Op::kSyncFs;
    const Op dir_sync = mode == SsdSyncMode::kPerFile ? Op::kSyncDir : Op::kSyncFs;
    size_t i = 0, batches = 0, largest = 0, dir_syncs = 0;
    while (i < log.size()) {
      size_t opens = 0, syncs = 0, renames = 0, dirs = 0;
      while (i < log.size() && log[i].first == Op::kOpenWrite) ++opens, ++i;
      while (i < log.size() && log[i].first == data_sync &&
             (syncs == 0 || data_sync == Op::kSync)) {
        ++syncs, ++i;
      }
      while (i < log.size() && log[i].first == Op::kRename) ++renames, ++i;
      while (i < log.size() && log[i].first == dir_sync) ++dirs, ++i;
      ASSERT_GT(opens, 0u) << "op " << i;
      EXPECT_EQ(syncs, mode == SsdSyncMode::kPerFile ? opens : 1u);
      EXPECT_EQ(renames, opens);
      if (mode == SsdSyncMode::kPerFile) {
        EXPECT_GE(dirs, 1u);
        EXPECT_LE(dirs, renames);
      } else {
        EXPECT_EQ(dirs, 1u);
      }
      ++batches;
      largest = std::max(largest, opens);
      dir_syncs += dirs;
    }
    EXPECT_EQ(largest, 6u);
    EXPECT_LT(batches, blocks);
    EXPECT_LE(dir_syncs, blocks);
    for (const auto& t : entries) EXPECT_EQ(FetchChecked(r, t), t.size() - 1);
  }
}

// kFilesystem leaves batches smaller than filesystem_sync_min_blocks to per-file syncs.
TEST(SsdTierBatch, SmallBatchesUsePerFileSyncs) {
  std::unique_ptr<MemEnv> mem = MemEnv::Create(2);
  std::unique_ptr<FaultInjectionEnv> env = FaultInjectionEnv::Create(mem.get());
  SsdTierOptions o = TierOptions(env.get(), 1ull << 30, 64);
  ASSERT_EQ(o.sync_mode, SsdSyncMode::kFilesystem);  // the default
  o.layout = SsdLayout::kBlockFiles;
  o.batch_blocks = 1;
  o.filesystem_sync_min_blocks = 2;
  Rig r = MakeRig(o, Format::F16(), Format::F16(), 64);
  ASSERT_NE(r.tier, nullptr);
  std::atomic<int> file_syncs{0}, fs_syncs{0};
  env->SetRule([&](Op op, uint64_t, const std::string&) {
    file_syncs += op == Op::kSync;
    fs_syncs += op == Op::kSyncFs;
    return Fault::kNone;
  });
  const std::vector<std::vector<int32_t>> entries = Entries(3, 0, 9);
  StoreAndSpill(r, entries);
  EXPECT_EQ(static_cast<uint64_t>(file_syncs.load()), r.tier->Stats().spilled_blocks);
  EXPECT_EQ(fs_syncs.load(), 0);
  env->SetRule(nullptr);
  for (const auto& t : entries) EXPECT_EQ(FetchChecked(r, t), t.size() - 1);
}

// A crash at the n-th operation `at` of the second spill (after the first was acknowledged),
// or (`after`) at the operation following it: between a batch's writes and syncs, its syncs
// and renames, its renames and directory syncs; with kFilesystem, before and after each
// syncfs (the odd ones make data durable, the even ones renames, with one writer). Every
// other trial, the directories' unsynced changes survive the crash.
TEST(SsdTierBatch, CrashesBetweenTheStepsOfABatchLoseNoAcknowledgedBlock) {
  const std::vector<std::vector<int32_t>> first = Entries(4, 0, 3), second = Entries(6, 5000, 4);
  struct Point {
    SsdSyncMode mode;
    Op at;
    bool after;
    std::vector<int> nths;
  };
  const std::vector<int> odd = {1, 3, 5, 7}, all = {1, 2, 3, 4};
  const std::vector<Point> points = {
      {SsdSyncMode::kPerFile, Op::kAppend, false, odd},
      {SsdSyncMode::kPerFile, Op::kSync, false, odd},
      {SsdSyncMode::kPerFile, Op::kRename, false, odd},
      {SsdSyncMode::kPerFile, Op::kSyncDir, false, odd},
      {SsdSyncMode::kFilesystem, Op::kAppend, false, odd},
      {SsdSyncMode::kFilesystem, Op::kSyncFs, false, all},
      {SsdSyncMode::kFilesystem, Op::kSyncFs, true, all},
      {SsdSyncMode::kFilesystem, Op::kRename, false, odd},
  };
  int trial = 0;
  for (const Point& p : points) {
    for (int nth : p.nths) {
      ++trial;
      SCOPED_TRACE(std::string(Name(p.mode)) + (p.after ? " after op " : " at op ") +
                   std::to_string(static_cast<int>(p.at)) + " #" + std::to_string(nth));
      std::unique_ptr<MemEnv> mem = MemEnv::Create(trial);
      std::unique_ptr<FaultInjectionEnv> env = FaultInjectionEnv::Create(mem.get());
      SsdTierOptions o = ModeOptions(env.get(), p.mode);
      o.writer_threads = p.at == Op::kSyncFs ? 1 : 1 + trial % 3;
      o.batch_blocks = 8;
      std::vector<uint32_t> acked;
      std::atomic<int> seen{0};
      std::atomic<bool> armed{false};
      {
        Rig r = MakeRig(o, Format::Q8_0(), Format::BF16(), 64);
        ASSERT_NE(r.tier, nullptr);
        StoreAndSpill(r, first);
        env->SetRule([&](Op op, uint64_t, const std::string&) {
          if (armed.load()) return Fault::kCrash;  // the operation after the n-th `at`
          if (op != p.at || seen.fetch_add(1) + 1 != nth) return Fault::kNone;
          if (!p.after) return Fault::kCrash;
          armed = true;
          return Fault::kNone;
        });
        StoreAndSpill(r, second);
        EXPECT_TRUE(p.after || env->crashed());
        for (const auto& t : first) EXPECT_EQ(IndexedTokens(*r.tier, t), t.size());
        for (const auto& t : second) acked.push_back(IndexedTokens(*r.tier, t));
        // A crash after the last syncfs may find no operation to land on: this one.
        if (armed.load() && !env->crashed()) (void)env->ListDir("/ssd");
        EXPECT_TRUE(env->crashed());
      }
      if (trial % 2 == 0) LeakDirectoryChanges(*mem);
      env->Restart(static_cast<MemEnv::CrashMode>(trial % 3));
      env->SetRule(nullptr);
      Rig r = MakeRig(o, Format::Q8_0(), Format::BF16(), 64);
      ASSERT_NE(r.tier, nullptr);
      for (const auto& t : first) EXPECT_EQ(FetchChecked(r, t), t.size() - 1);
      for (size_t i = 0; i < second.size(); ++i) {
        EXPECT_GE(FetchChecked(r, second[i]), std::min<uint32_t>(acked[i], second[i].size() - 1));
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
  testing::CrashTrials totals;
  for (int trial = 0; trial < 200; ++trial) {
    std::unique_ptr<MemEnv> mem = MemEnv::Create(1000 + trial);
    std::unique_ptr<FaultInjectionEnv> env = FaultInjectionEnv::Create(mem.get());
    SsdTierOptions o = TierOptions(env.get(), 1ull << 30, 1 + static_cast<uint32_t>(rng() % 32));
    o.layout = SsdLayout::kBlockFiles;
    o.sync_mode = kModes[trial % 2];
    o.filesystem_sync_min_blocks = 1 + static_cast<uint32_t>(rng() % 3);
    o.writer_threads = 1 + static_cast<uint32_t>(rng() % 4);
    o.batch_blocks = 1 + static_cast<uint32_t>(rng() % 10);
    const uint64_t crash_at = 4 + rng() % 200;
    testing::CrashTrial(o, *mem, *env, Format::Q4_0(), Format::F16(), crash_at, trial / 2 % 2 == 0,
                        static_cast<MemEnv::CrashMode>(trial % 3), entries, trial, totals,
                        [&](Rig&) { BlockFilesAndNoTmp(*mem); });
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(totals.crashes, 130u);
  EXPECT_GT(totals.acked_tokens, 0u);
}

TEST(SsdTierBatch, DiskFullInTheMiddleOfABatchSkipsOnlyWhatDoesNotFit) {
  for (int run = 0; run < 4; ++run) {
    const uint32_t threads = run % 2 == 0 ? 1u : 3u;
    SCOPED_TRACE(std::string(Name(kModes[run / 2])) + ", threads " + std::to_string(threads));
    std::unique_ptr<MemEnv> mem = MemEnv::Create(20 + run);
    SsdTierOptions o = ModeOptions(mem.get(), kModes[run / 2]);
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

// Injected ENOSPC on one append, EIO on one file sync, one rename, one directory sync or one
// syncfs, each inside a batch: only the blocks concerned are skipped (a failed syncfs: its
// whole batch), counted by reason, and leave no file behind. A FilesystemSync that cannot be
// opened falls back to per-file syncs (nothing skipped).
TEST(SsdTierBatch, AFailedStepSkipsOnlyItsBlocks) {
  struct Case {
    SsdSyncMode mode;
    Op op;
    int nth;
    Fault fault;
    SpillSkip reason;
    bool one;  // exactly one block skipped (else at least one)
  };
  const SsdSyncMode P = SsdSyncMode::kPerFile, F = SsdSyncMode::kFilesystem;
  for (const Case& c : {Case{P, Op::kAppend, 3, Fault::kEnospc, SpillSkip::kDiskFull, true},
                        Case{P, Op::kSync, 3, Fault::kEio, SpillSkip::kIoError, true},
                        Case{P, Op::kRename, 3, Fault::kEio, SpillSkip::kIoError, true},
                        Case{P, Op::kSyncDir, 3, Fault::kEio, SpillSkip::kIoError, false},
                        Case{F, Op::kAppend, 3, Fault::kEnospc, SpillSkip::kDiskFull, true},
                        Case{F, Op::kClose, 3, Fault::kEio, SpillSkip::kIoError, true},
                        Case{F, Op::kRename, 3, Fault::kEio, SpillSkip::kIoError, true},
                        Case{F, Op::kSyncFs, 1, Fault::kEio, SpillSkip::kIoError, false},
                        Case{F, Op::kSyncFs, 2, Fault::kEio, SpillSkip::kIoError, false},
                        Case{F, Op::kSyncFs, 1, Fault::kEnospc, SpillSkip::kDiskFull, false},
                        Case{F, Op::kOpenRead, 1, Fault::kEio, SpillSkip::kIoError, false}}) {
    SCOPED_TRACE(std::string(Name(c.mode)) + " op " + std::to_string(static_cast<int>(c.op)) +
                 " #" + std::to_string(c.nth));
    std::unique_ptr<MemEnv> mem = MemEnv::Create(30);
    std::unique_ptr<FaultInjectionEnv> env = FaultInjectionEnv::Create(mem.get());
    SsdTierOptions o = ModeOptions(env.get(), c.mode);
    o.writer_threads = 1;
    o.batch_blocks = 8;
    Rig r = MakeRig(o, Format::BF16(), Format::Q8_0(), 64);
    ASSERT_NE(r.tier, nullptr);
    std::atomic<int> seen{0};
    env->SetRule([&](Op op, uint64_t, const std::string&) {
      return op == c.op && ++seen == c.nth ? c.fault : Fault::kNone;
    });
    const std::vector<std::vector<int32_t>> entries = Entries(4, 0, 7);
    StoreAndSpill(r, entries);
    const SsdTierStats s = r.tier->Stats();
    const uint64_t skipped = s.skipped[static_cast<int>(c.reason)];
    if (c.op == Op::kOpenRead) {
      EXPECT_EQ(skipped, 0u);  // that batch synced file by file
    } else if (c.one) {
      EXPECT_EQ(skipped, 1u);
    } else {
      EXPECT_GE(skipped, 1u);  // a directory or a syncfs covers several blocks
    }
    EXPECT_EQ(s.skipped[0] + s.skipped[1] + s.skipped[2], skipped);
    EXPECT_EQ(BlockFilesAndNoTmp(*mem), s.spilled_blocks);
    env->SetRule(nullptr);
    for (const auto& t : entries) FetchChecked(r, t);
    r = Rig{};
    mem->SimulateCrash(MemEnv::CrashMode::kTornGarbage);  // every acknowledged block survives
    r = MakeRig(o, Format::BF16(), Format::Q8_0(), 64);
    ASSERT_NE(r.tier, nullptr);
    EXPECT_EQ(r.tier->Stats().found_blocks, s.spilled_blocks);
    EXPECT_EQ(r.tier->Stats().quarantined, 0u);
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
  o.batch_bytes = 1 << 20;
  o.sync_mode = static_cast<SsdSyncMode>(7);
  EXPECT_EQ(SsdTier::Open(o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvtier
