// SsdTier with segment files (SsdLayout::kSegments, docs/formats/kv-segment-file.md): a
// writer's batch is one file, synced before its rename and renamed durably before any of its
// blocks is indexed; restarts rebuild the index from the headers; crashes, torn writes, bit
// flips, ENOSPC and EIO never serve a wrong byte; the cap counts the files' real bytes and
// evicts whole segments; version-1 block files are read beside segments; a chain read from
// one segment reuses its read handle; spills, loads and evictions from several threads.
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "kvtier/ssd_tier.h"
#include "tier/tier_test_util.h"

namespace kvtier {
namespace {

using testing::Entries;
using testing::FetchChecked;
using testing::kModelA;
using testing::MakeRig;
using testing::Range;
using testing::Rig;
using testing::StoreAndSpill;
using testing::TierOptions;
using Op = FaultInjectionEnv::Op;
using Fault = FaultInjectionEnv::Fault;

constexpr SsdSyncMode kModes[] = {SsdSyncMode::kPerFile, SsdSyncMode::kFilesystem};

SsdTierOptions SegOptions(Env* env, SsdSyncMode mode = SsdSyncMode::kFilesystem,
                          uint64_t max_bytes = 1ull << 30) {
  SsdTierOptions o = TierOptions(env, max_bytes, 64);
  o.layout = SsdLayout::kSegments;
  o.sync_mode = mode;
  o.filesystem_sync_min_blocks = 1;
  return o;
}

// Segment files under /ssd/segments (EXPECTs no .tmp is left), with their sizes.
std::vector<DirEntry> Segments(MemEnv& mem) {
  std::vector<DirEntry> out;
  for (DirEntry& f : mem.ListDir("/ssd/segments").value()) {
    EXPECT_EQ(f.name.find(".tmp"), std::string::npos) << f.name;
    f.size = mem.FileSize("/ssd/segments/" + f.name).value();
    out.push_back(f);
  }
  return out;
}

uint64_t SegmentBytes(MemEnv& mem) {
  uint64_t n = 0;
  for (const DirEntry& f : Segments(mem)) n += f.size;
  return n;
}

// Per batch, in both sync modes: one file opened (its .tmp), its bytes made durable (one
// fdatasync or syncfs), one rename, the rename made durable (one directory fsync or syncfs),
// and nothing else; as many segment files as batches. Then a restart (everything unsynced
// dropped, torn) finds every block from the headers, and serves each bit for bit.
TEST(SsdTierSegment, ABatchIsOneFileSyncedRenamedAndSyncedBeforeItsBlocksAreIndexed) {
  for (SsdSyncMode mode : kModes) {
    std::unique_ptr<MemEnv> mem = MemEnv::Create(1);
    std::unique_ptr<FaultInjectionEnv> env = FaultInjectionEnv::Create(mem.get());
    SsdTierOptions o = SegOptions(env.get(), mode);
    o.writer_threads = 1;
    o.batch_blocks = 6;
    std::vector<std::vector<int32_t>> entries = Entries(6, 0, 2);
    uint64_t spilled = 0;
    {
      Rig r = MakeRig(o, Format::Q8_0(), Format::F16(), 64);
      ASSERT_NE(r.tier, nullptr);
      const std::vector<testing::OpRecord> log = testing::SpillLogged(
          r, *env, entries, [](Op op, const std::string&, const std::vector<testing::OpRecord>& l) {
            // Consecutive appends of one file are logged once.
            if (op == Op::kAppend) return l.empty() || l.back().first != Op::kAppend;
            return op == Op::kOpenWrite || op == Op::kSync || op == Op::kRename ||
                   op == Op::kSyncDir || op == Op::kSyncFs;
          });
      spilled = r.tier->Stats().spilled_blocks;
      const Op data_sync = mode == SsdSyncMode::kPerFile ? Op::kSync : Op::kSyncFs;
      const Op dir_sync = mode == SsdSyncMode::kPerFile ? Op::kSyncDir : Op::kSyncFs;
      ASSERT_EQ(log.size() % 5, 0u);
      const size_t batches = log.size() / 5;
      for (size_t b = 0; b < batches; ++b) {
        const auto* step = &log[5 * b];
        EXPECT_EQ(step[0].first, Op::kOpenWrite);
        EXPECT_NE(step[0].second.find("/ssd/segments/"), std::string::npos) << step[0].second;
        EXPECT_NE(step[0].second.find(".kvs.tmp"), std::string::npos) << step[0].second;
        EXPECT_EQ(step[1].first, Op::kAppend);
        EXPECT_EQ(step[2].first, data_sync);
        EXPECT_EQ(step[3].first, Op::kRename);
        EXPECT_EQ(step[3].second, step[0].second);
        EXPECT_EQ(step[4].first, dir_sync);
      }
      EXPECT_EQ(Segments(*mem).size(), batches);
      EXPECT_EQ(r.tier->Stats().files, batches);
      EXPECT_LT(batches, spilled);
      EXPECT_EQ(r.tier->Stats().bytes, SegmentBytes(*mem));
      for (const auto& t : entries) EXPECT_EQ(FetchChecked(r, t), t.size() - 1);
    }
    mem->SimulateCrash(MemEnv::CrashMode::kTornGarbage);
    Rig r = MakeRig(o, Format::Q8_0(), Format::F16(), 64);
    ASSERT_NE(r.tier, nullptr);
    EXPECT_EQ(r.tier->Stats().found_blocks, spilled);
    for (const auto& t : entries) EXPECT_EQ(FetchChecked(r, t), t.size() - 1);
  }
}

// Random crash points inside segment writes, random batch settings, both sync modes, with
// directory changes leaking before the crash or not, torn or scrambled unsynced bytes: every
// acknowledged block survives, every block served holds exactly the rows written, no .tmp
// is left.
TEST(SsdTierSegment, RandomCrashPointsKeepEveryAcknowledgedBlockAndServeNoWrongByte) {
  std::mt19937_64 rng(78);
  const std::vector<std::vector<int32_t>> entries = Entries(8, 0, 5);
  testing::CrashTrials totals;
  for (int trial = 0; trial < 120; ++trial) {
    std::unique_ptr<MemEnv> mem = MemEnv::Create(2000 + trial);
    std::unique_ptr<FaultInjectionEnv> env = FaultInjectionEnv::Create(mem.get());
    SsdTierOptions o = SegOptions(env.get(), kModes[trial % 2]);
    o.queue_blocks = 1 + static_cast<uint32_t>(rng() % 32);
    o.filesystem_sync_min_blocks = 1 + static_cast<uint32_t>(rng() % 3);
    o.writer_threads = 1 + static_cast<uint32_t>(rng() % 4);
    o.batch_blocks = 1 + static_cast<uint32_t>(rng() % 10);
    const uint64_t crash_at = 6 + rng() % 90;
    testing::CrashTrial(o, *mem, *env, Format::Q4_0(), Format::BF16(), crash_at, trial / 2 % 2 == 0,
                        static_cast<MemEnv::CrashMode>(trial % 3), entries, trial, totals,
                        [&](Rig& r) {
                          // Nothing torn was renamed; the tier counts the files' real bytes.
                          EXPECT_EQ(r.tier->Stats().quarantined, 0u) << "trial " << trial;
                          EXPECT_EQ(r.tier->Stats().bytes, SegmentBytes(*mem)) << "trial " << trial;
                        });
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(totals.crashes, 80u);
  EXPECT_GT(totals.acked_tokens, 0u);
}

// One failed step of a segment's way (ENOSPC or EIO on its open, an append, a torn append,
// its sync, close, rename or the sync of the rename) skips exactly that batch's blocks,
// counted by reason, and leaves no file; blocks of other batches are served, survive a crash.
TEST(SsdTierSegment, AFailedStepSkipsItsBatchAndLeavesNoFile) {
  struct Case {
    SsdSyncMode mode;
    Op op;
    Fault fault;
    SpillSkip reason;
  };
  const SsdSyncMode P = SsdSyncMode::kPerFile, F = SsdSyncMode::kFilesystem;
  for (const Case& c : {Case{P, Op::kOpenWrite, Fault::kEnospc, SpillSkip::kDiskFull},
                        Case{P, Op::kAppend, Fault::kEnospc, SpillSkip::kDiskFull},
                        Case{P, Op::kAppend, Fault::kTornWrite, SpillSkip::kIoError},
                        Case{P, Op::kSync, Fault::kEio, SpillSkip::kIoError},
                        Case{P, Op::kRename, Fault::kEio, SpillSkip::kIoError},
                        Case{P, Op::kSyncDir, Fault::kEio, SpillSkip::kIoError},
                        Case{F, Op::kClose, Fault::kEio, SpillSkip::kIoError},
                        Case{F, Op::kSyncFs, Fault::kEnospc, SpillSkip::kDiskFull},
                        Case{F, Op::kSyncFs, Fault::kEio, SpillSkip::kIoError}}) {
    for (int nth : {1, 2}) {
      SCOPED_TRACE("op " + std::to_string(static_cast<int>(c.op)) + " #" + std::to_string(nth));
      std::unique_ptr<MemEnv> mem = MemEnv::Create(30);
      std::unique_ptr<FaultInjectionEnv> env = FaultInjectionEnv::Create(mem.get());
      SsdTierOptions o = SegOptions(env.get(), c.mode);
      o.writer_threads = 1;
      o.batch_blocks = 3;
      Rig r = MakeRig(o, Format::BF16(), Format::Q8_0(), 64);
      ASSERT_NE(r.tier, nullptr);
      std::atomic<int> seen{0};
      env->SetRule([&](Op op, uint64_t, const std::string&) {
        return op == c.op && ++seen == nth ? c.fault : Fault::kNone;
      });
      const std::vector<std::vector<int32_t>> entries = Entries(4, 0, 7);
      StoreAndSpill(r, entries);
      env->SetRule(nullptr);
      const SsdTierStats s = r.tier->Stats();
      const uint64_t skipped = s.skipped[static_cast<int>(c.reason)];
      EXPECT_GE(skipped, 1u);
      EXPECT_LE(skipped, 3u);  // one batch
      EXPECT_EQ(s.skipped[0] + s.skipped[1] + s.skipped[2], skipped);
      EXPECT_EQ(Segments(*mem).size(), s.files);
      EXPECT_EQ(s.bytes, SegmentBytes(*mem));
      for (const auto& t : entries) FetchChecked(r, t);
      r = Rig{};
      mem->SimulateCrash(MemEnv::CrashMode::kTornGarbage);
      r = MakeRig(o, Format::BF16(), Format::Q8_0(), 64);
      ASSERT_NE(r.tier, nullptr);
      EXPECT_EQ(r.tier->Stats().found_blocks, s.spilled_blocks);
      EXPECT_EQ(r.tier->Stats().quarantined, 0u);
    }
  }
}

// A bit flip in a record's rows is found when its block is read (the restart reads headers
// only: every block is indexed), the segment is quarantined with one log line and its blocks
// are misses; blocks of the chain before it are served. A flip in a record's header, a
// truncated segment, a wrong name are found at Open() and quarantined; a newer segment
// version is left alone; a .tmp segment is removed.
TEST(SsdTierSegment, DamagedSegmentsAreQuarantinedAndNeverServed) {
  for (int damage = 0; damage < 4; ++damage) {
    SCOPED_TRACE("damage " + std::to_string(damage));
    std::unique_ptr<MemEnv> mem = MemEnv::Create(40);
    SsdTierOptions o = SegOptions(mem.get());
    o.writer_threads = 1;
    o.batch_blocks = 1;  // one segment per block: the chain's blocks in their own segments
    const std::vector<int32_t> t = Range(1, 13);  // blocks of 4, 4, 4, 1
    {
      Rig r = MakeRig(o, Format::Q4_0(), Format::F16(), 16);
      ASSERT_NE(r.tier, nullptr);
      StoreAndSpill(r, {t});
      ASSERT_EQ(r.tier->Stats().files, 4u);
    }
    // The segment of the chain's second block (its record's key: bytes 16..31 of the record).
    const BlockKey ns =
        NamespaceKey(kModelA, testing::kTierShape, Format::Q4_0(), Format::F16(), testing::kTierBt);
    const BlockKey b0 = ChainBlockKey(ns, std::span<const int32_t>(t).first(4));
    const BlockKey b1 = ChainBlockKey(b0, std::span<const int32_t>(t).subspan(4, 4));
    std::string name;
    std::vector<uint8_t> bytes;
    for (const DirEntry& f : Segments(*mem)) {
      bytes = mem->ReadFile("/ssd/segments/" + f.name).value();
      uint64_t lo = 0, hi = 0;
      std::memcpy(&lo, bytes.data() + 40 + 16, 8);
      std::memcpy(&hi, bytes.data() + 40 + 24, 8);
      if (lo == b1.lo && hi == b1.hi) {
        name = f.name;
        break;
      }
    }
    ASSERT_FALSE(name.empty());
    const std::string victim = "/ssd/segments/" + name;
    if (damage == 0) bytes[bytes.size() - 40] ^= 0x10;  // a payload bit
    if (damage == 1) bytes[40 + 140] ^= 0x01;           // a token id in the record's header
    if (damage == 2) bytes.erase(bytes.end() - 8, bytes.end());  // truncated
    if (damage == 3) bytes[8] = 4;                      // a newer segment version
    ASSERT_TRUE(mem->WriteFileDurably(victim, bytes).ok());
    ASSERT_TRUE(mem->WriteFileDurably("/ssd/segments/00000000000000ff.kvs.tmp", bytes).ok());
    Rig r = MakeRig(o, Format::Q4_0(), Format::F16(), 16);
    ASSERT_NE(r.tier, nullptr);
    const SsdTierStats s = r.tier->Stats();
    EXPECT_EQ(s.removed_tmp_files, 1u);
    EXPECT_EQ(s.found_blocks, damage == 0 ? 4u : 3u);
    EXPECT_EQ(s.quarantined, damage == 1 || damage == 2 ? 1u : 0u);
    EXPECT_EQ(s.ignored_newer, damage == 3 ? 1u : 0u);
    EXPECT_EQ(FetchChecked(r, t), 4u);  // only the block before the damaged one
    EXPECT_EQ(r.tier->Stats().quarantined, damage == 3 ? 0u : 1u);
    EXPECT_EQ(mem->FileExists(victim), damage == 3);
    EXPECT_EQ(mem->FileExists("/ssd/quarantine/" + name), damage != 3);
    EXPECT_EQ(r.tier->Stats().bytes, SegmentBytes(*mem) - (damage == 3 ? bytes.size() : 0));
  }
}

// The cap counts the segments' real bytes (never passed, on every spill and at Open() with a
// smaller cap) and evicts whole segments in LRU order of their latest use: an old entry that
// was read stays, an old one that was not goes. ENOSPC from the disk never passes its size.
TEST(SsdTierSegment, TheCapCountsRealBytesAndEvictsWholeSegmentsLeastRecentlyUsedFirst) {
  std::unique_ptr<MemEnv> mem = MemEnv::Create(50);
  uint64_t seg = 0;  // the largest segment of 2 full f16 blocks (batches of up to 2)
  SsdTierOptions o = SegOptions(mem.get());
  o.writer_threads = 1;
  o.batch_blocks = 2;
  {
    Rig probe = MakeRig(o, Format::F16(), Format::F16(), 16);
    ASSERT_NE(probe.tier, nullptr);
    StoreAndSpill(probe, {Range(1, 8)});
    for (const DirEntry& f : Segments(*mem)) seg = std::max(seg, f.size);
    ASSERT_TRUE(probe.tier->Clear().ok());
  }
  ASSERT_GT(seg, 0u);
  o.max_bytes = 16 * seg;  // segment limit max_bytes / 8 = 2 segments' worth: batches of 2
  Rig r = MakeRig(o, Format::F16(), Format::F16(), 16);
  ASSERT_NE(r.tier, nullptr);
  const std::vector<int32_t> keep = Range(100000, 8), drop = Range(200000, 8);
  StoreAndSpill(r, {keep});  // in segments of their own
  StoreAndSpill(r, {drop});
  for (int32_t i = 0; i < 20; ++i) {
    EXPECT_EQ(FetchChecked(r, keep), 7u);  // used: its segment is recent
    r.cache->Evict(UINT64_MAX);
    StoreAndSpill(r, {Range(1000 * (i + 1), 8)});
    const SsdTierStats s = r.tier->Stats();
    EXPECT_LE(s.bytes, o.max_bytes);
    EXPECT_EQ(s.bytes, SegmentBytes(*mem));
    EXPECT_LE(SegmentBytes(*mem), o.max_bytes);
  }
  EXPECT_GT(r.tier->Stats().evicted_blocks, 0u);
  EXPECT_EQ(FetchChecked(r, drop), 0u);
  EXPECT_EQ(FetchChecked(r, keep), 7u);
  r = Rig{};
  o.max_bytes = 3 * seg;
  Rig small = MakeRig(o, Format::F16(), Format::F16(), 16);
  ASSERT_NE(small.tier, nullptr);
  EXPECT_LE(SegmentBytes(*mem), 3 * seg);
  EXPECT_EQ(small.tier->Stats().bytes, SegmentBytes(*mem));
  EXPECT_GT(small.tier->Stats().blocks, 0u);
  // A disk smaller than the cap: ENOSPC skips, the disk's size is never passed.
  small = Rig{};
  mem->SetCapacity(mem->TotalBytes() + 2 * seg + seg / 2);
  o.max_bytes = 1ull << 30;
  Rig full = MakeRig(o, Format::F16(), Format::F16(), 16);
  ASSERT_NE(full.tier, nullptr);
  StoreAndSpill(full, Entries(6, 300000, 8));
  EXPECT_GT(full.tier->Stats().skipped[static_cast<int>(SpillSkip::kDiskFull)], 0u);
  EXPECT_EQ(full.tier->Stats().bytes, SegmentBytes(*mem));
}

// Version-1 block files written before are read beside segments, through restarts; reading
// a chain out of one segment opens it at most once per loading thread.
TEST(SsdTierSegment, BlockFilesAreReadBesideSegmentsAndAChainReusesItsHandle) {
  std::unique_ptr<MemEnv> mem = MemEnv::Create(60);
  std::unique_ptr<FaultInjectionEnv> env = FaultInjectionEnv::Create(mem.get());
  const std::vector<std::vector<int32_t>> old_entries = Entries(3, 0, 9);
  SsdTierOptions v1 = SegOptions(env.get());
  v1.layout = SsdLayout::kBlockFiles;
  {
    Rig r = MakeRig(v1, Format::Q8_0(), Format::Q8_0(), 64);
    ASSERT_NE(r.tier, nullptr);
    StoreAndSpill(r, old_entries);
  }
  SsdTierOptions o = SegOptions(env.get());
  o.writer_threads = 1;
  o.batch_blocks = 16;
  const std::vector<int32_t> chain = Range(7000, 48);  // 12 full blocks, in one segment
  uint64_t old_blocks = 0;
  {
    Rig r = MakeRig(o, Format::Q8_0(), Format::Q8_0(), 64);
    ASSERT_NE(r.tier, nullptr);
    old_blocks = r.tier->Stats().found_blocks;
    EXPECT_GT(old_blocks, 0u);
    // The writer waits in its first file's open until the chain's 12 blocks are all queued.
    std::atomic<bool> go{false}, waiting{false};
    env->SetRule([&](Op op, uint64_t, const std::string&) {
      while (op == Op::kOpenWrite && !go.load()) {
        waiting = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      return Fault::kNone;
    });
    const std::vector<int32_t> first = Range(90000, 4);
    ASSERT_TRUE(r.cache->Store(kModelA, first, testing::SeqOf(r.pool, first)).ok());
    r.cache->Evict(UINT64_MAX);
    while (!waiting.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_TRUE(r.cache->Store(kModelA, chain, testing::SeqOf(r.pool, chain)).ok());
    r.cache->Evict(UINT64_MAX);
    go = true;
    r.tier->Flush();
    env->SetRule(nullptr);
    EXPECT_EQ(r.tier->Stats().files, old_blocks + 2);
  }
  Rig r = MakeRig(o, Format::Q8_0(), Format::Q8_0(), 64);
  ASSERT_NE(r.tier, nullptr);
  EXPECT_EQ(r.tier->Stats().found_blocks, old_blocks + 13);
  std::atomic<int> opens{0};
  env->SetRule([&](Op op, uint64_t, const std::string& path) {
    if (op == Op::kOpenRead && path.find("/ssd/segments/") == 0) ++opens;
    return Fault::kNone;
  });
  EXPECT_EQ(FetchChecked(r, chain), 47u);
  EXPECT_GE(opens.load(), 1);
  EXPECT_LE(opens.load(), 4);  // one per promotion thread at most, not one per block
  env->SetRule(nullptr);
  for (const auto& t : old_entries) EXPECT_EQ(FetchChecked(r, t), t.size() - 1);
}

// Spills, promotions, segment evictions (a small cap) and read handles from three threads
// at once (run under ThreadSanitizer): every block served is exact, the cap holds.
TEST(SsdTierSegment, ConcurrentSpillsLoadsAndEvictions) {
  std::unique_ptr<MemEnv> mem = MemEnv::Create(70);
  SsdTierOptions o = SegOptions(mem.get(), SsdSyncMode::kFilesystem, 96 * 1024);
  o.writer_threads = 2;
  o.batch_blocks = 4;
  Rig r = MakeRig(o, Format::Q8_0(), Format::F16(), 24);
  ASSERT_NE(r.tier, nullptr);
  std::vector<std::thread> threads;
  for (int w = 0; w < 3; ++w) {
    threads.emplace_back([&r, w] {
      for (int i = 0; i < 12; ++i) {
        const std::vector<int32_t> t = Range(100000 * (w + 1) + 100 * (i % 5), 10 + 3 * (i % 4));
        Result<PrefixFetchResult> f = r.cache->Fetch(kModelA, t, r.pool);
        ASSERT_TRUE(f.ok());
        const uint32_t n = f->reused_tokens;
        EXPECT_EQ(testing::Encoded(f->sequence, n), testing::Expected(r.pool, r.pool, r.pool, t, n));
        f->sequence = SequenceCache(r.pool);
        ASSERT_TRUE(r.cache->Store(kModelA, t, testing::SeqOf(r.pool, t)).ok());
        if (i % 3 == 2) r.cache->Evict(UINT64_MAX);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  r.tier->Flush();
  // Whether a fetch above found its blocks on disk depends on how far the writers had got
  // and on what the cap evicted meanwhile; an entry spilled now must come back from disk.
  const std::vector<int32_t> last = Range(900000, 19);
  ASSERT_TRUE(r.cache->Store(kModelA, last, testing::SeqOf(r.pool, last)).ok());
  r.cache->Evict(UINT64_MAX);
  r.tier->Flush();
  EXPECT_EQ(FetchChecked(r, last), last.size() - 1);
  const SsdTierStats s = r.tier->Stats();
  EXPECT_LE(s.bytes, o.max_bytes);
  EXPECT_EQ(s.bytes, SegmentBytes(*mem));
  EXPECT_GT(s.loaded_blocks, 0u);
  EXPECT_GT(s.evicted_blocks, 0u);
}

}  // namespace
}  // namespace kvtier
