// Segment ids and the index against a changing directory (issue 36): the counter ignores
// quarantined and foreign names and never wraps onto a taken name; a publish never replaces a
// file (Env::RenameNoReplace, in the in-memory, fault and POSIX envs); a removed segments/
// directory is noticed and Stats() counts only what is on disk; Reconcile() on demand, and
// ReconcileSoon() on a writer thread, rate-limited (its cost measured on a real directory).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "base/crc32c.h"
#include "base/timer.h"
#include "kvtier/ssd_tier.h"
#include "tier/segment_file.h"
#include "tier/tier_test_util.h"

namespace kvtier {
namespace {

using testing::Entries;
using testing::FetchChecked;
using testing::MakeRig;
using testing::Rig;
using testing::StoreAndSpill;
using testing::TierOptions;
using Op = FaultInjectionEnv::Op;
using Fault = FaultInjectionEnv::Fault;

SsdTierOptions SegOptions(Env* env) {
  SsdTierOptions o = TierOptions(env, 1ull << 30, 64);
  o.layout = SsdLayout::kSegments;
  o.writer_threads = 1;
  o.batch_blocks = 4;
  return o;
}

// name -> CRC of every *.kvs file under `dir`.
std::map<std::string, uint32_t> Checksums(Env& env, const std::string& dir) {
  std::map<std::string, uint32_t> out;
  for (const DirEntry& f : env.ListDir(dir).value()) {
    std::vector<uint8_t> b = env.ReadFile(dir + "/" + f.name).value();
    out[f.name] = Crc32c(b);
  }
  return out;
}

// Bytes of the segment files (16 hex digits + .kvs) under `dir`: what the tier may count.
uint64_t OurBytes(Env& env, const std::string& dir, uint64_t* files = nullptr) {
  uint64_t n = 0, k = 0;
  for (const DirEntry& f : env.ListDir(dir).value()) {
    if (f.name.size() != 20 || !f.name.ends_with(".kvs") ||
        f.name.find_first_not_of("0123456789abcdef") != 16) {
      continue;
    }
    n += env.FileSize(dir + "/" + f.name).value();
    ++k;
  }
  if (files != nullptr) *files = k;
  return n;
}

TEST(RenameNoReplace, RefusesATakenNameInEveryEnv) {
  std::unique_ptr<MemEnv> mem = MemEnv::Create(1);
  std::unique_ptr<FaultInjectionEnv> fault = FaultInjectionEnv::Create(mem.get());
  char tmpl[] = "/tmp/kvtier_noreplace_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string real = tmpl;
  for (auto [env, dir] : {std::pair<Env*, std::string>{mem.get(), "/d"},
                          {fault.get(), "/e"}, {Env::Default(), real}}) {
    ASSERT_TRUE(env->CreateDirs(dir).ok());
    ASSERT_TRUE(env->WriteFileDurably(dir + "/a", std::vector<uint8_t>{1}).ok());
    ASSERT_TRUE(env->WriteFileDurably(dir + "/b", std::vector<uint8_t>{2, 2}).ok());
    Status s = env->RenameNoReplace(dir + "/a", dir + "/b");
    EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s.ToString();
    EXPECT_EQ(env->FileSize(dir + "/b").value(), 2u);
    EXPECT_TRUE(env->FileExists(dir + "/a"));
    ASSERT_TRUE(env->RenameNoReplace(dir + "/a", dir + "/c").ok());
    EXPECT_FALSE(env->FileExists(dir + "/a"));
    EXPECT_EQ(env->FileSize(dir + "/c").value(), 1u);
    for (const char* n : {"/b", "/c"}) (void)env->RemoveFile(dir + n);
  }
  (void)Env::Default()->RemoveDir(real);
  // The fault env counts it as a rename and injects there.
  fault->SetRule([](Op op, uint64_t, const std::string&) {
    return op == Op::kRename ? Fault::kEio : Fault::kNone;
  });
  ASSERT_TRUE(mem->WriteFileDurably("/e/x", std::vector<uint8_t>{1}).ok());
  EXPECT_EQ(fault->RenameNoReplace("/e/x", "/e/y").code(), StatusCode::kIOError);
  EXPECT_TRUE(mem->FileExists("/e/x"));
}

// The scenario: a stray fffffffffffffffe.kvs (garbage: quarantined at open) and
// other foreign names planted among valid segments, then 200 spills: every pre-existing
// segment keeps its bytes, new ids continue from the largest valid one, stats == disk.
TEST(SsdTierIds, PlantedNamesNeitherSetTheCounterNorGetOverwritten) {
  std::unique_ptr<MemEnv> mem = MemEnv::Create(2);
  const std::string seg = "/ssd/segments";
  {
    Rig r = MakeRig(SegOptions(mem.get()), Format::Q8_0(), Format::F16(), 64);
    ASSERT_NE(r.tier, nullptr);
    StoreAndSpill(r, Entries(12, 0, 3));
  }
  const std::vector<uint8_t> junk(100, 0xab);
  for (const char* n : {"fffffffffffffffe.kvs", "ffffffffffffffff.kvs", "notes.kvs",
                        "0000000000000001.kvs.bak", "zzzzzzzzzzzzzzzz.kvs"}) {
    ASSERT_TRUE(mem->WriteFileDurably(seg + "/" + n, junk).ok());
  }
  const std::map<std::string, uint32_t> before = Checksums(*mem, seg);
  Rig r = MakeRig(SegOptions(mem.get()), Format::Q8_0(), Format::F16(), 64);
  ASSERT_NE(r.tier, nullptr);
  EXPECT_EQ(r.tier->Stats().quarantined, 2u);  // the two 16-hex-digit garbage files
  for (int i = 0; i < 200; ++i) StoreAndSpill(r, Entries(1, 100000 + 1000 * i, 10 + i));
  const std::map<std::string, uint32_t> after = Checksums(*mem, seg);
  for (const auto& [name, crc] : before) {
    if (name.starts_with("ffffffffffffff")) continue;  // quarantined
    ASSERT_TRUE(after.contains(name)) << name;
    EXPECT_EQ(after.at(name), crc) << name << " was overwritten";
  }
  for (const auto& [name, crc] : after) EXPECT_FALSE(name.starts_with("ffff")) << name;
  const SsdTierStats s = r.tier->Stats();
  uint64_t files = 0;
  EXPECT_EQ(s.bytes, OurBytes(*mem, seg, &files));
  EXPECT_EQ(s.files, files);
  EXPECT_GE(s.spilled_blocks, 200u);
  EXPECT_EQ(s.id_collisions, 0u);
}

// A valid segment whose id is at the top of the range: the counter starts over at 1, skips
// the names taken (counted as collisions) and replaces nothing.
TEST(SsdTierIds, TheCounterWrapsPastTakenNamesWithoutReplacingThem) {
  std::unique_ptr<MemEnv> mem = MemEnv::Create(3);
  const std::string seg = "/ssd/segments";
  {
    Rig r = MakeRig(SegOptions(mem.get()), Format::Q8_0(), Format::F16(), 64);
    ASSERT_NE(r.tier, nullptr);
    StoreAndSpill(r, Entries(8, 0, 4));
  }
  // Re-id the first segment as fffffffffffffffe (header rewritten, CRC and all).
  std::vector<uint8_t> b = mem->ReadFile(seg + "/" + tier::SegmentName(1) + ".kvs").value();
  const tier::SegmentHeader h = tier::DecodeSegmentHeader(b, "s").value();
  tier::EncodeSegmentHeader(UINT64_MAX - 1, h.n_records, b.data());
  ASSERT_TRUE(mem->RemoveFile(seg + "/" + tier::SegmentName(1) + ".kvs").ok());
  ASSERT_TRUE(mem->WriteFileDurably(seg + "/fffffffffffffffe.kvs", b).ok());
  const std::map<std::string, uint32_t> before = Checksums(*mem, seg);
  Rig r = MakeRig(SegOptions(mem.get()), Format::Q8_0(), Format::F16(), 64);
  ASSERT_NE(r.tier, nullptr);
  EXPECT_EQ(r.tier->Stats().quarantined, 0u);
  for (int i = 0; i < 20; ++i) StoreAndSpill(r, Entries(1, 200000 + 1000 * i, 50 + i));
  const std::map<std::string, uint32_t> after = Checksums(*mem, seg);
  for (const auto& [name, crc] : before) {
    ASSERT_TRUE(after.contains(name)) << name;
    EXPECT_EQ(after.at(name), crc) << name << " was overwritten";
  }
  EXPECT_FALSE(after.contains("ffffffffffffffff.kvs"));
  EXPECT_FALSE(after.contains("0000000000000000.kvs"));
  EXPECT_TRUE(after.contains(tier::SegmentName(1) + ".kvs"));  // the freed name, reused
  const SsdTierStats s = r.tier->Stats();
  EXPECT_GT(s.id_collisions, 0u);
  EXPECT_EQ(s.bytes, OurBytes(*mem, seg));
}

// segments/ removed while the tier runs: the next load notices (Reconcile), so do the writer
// and Reconcile(); Stats() then counts only what is on disk, and loads of lost blocks miss.
TEST(SsdTierIds, ARemovedDirectoryIsNoticedAndStatsMatchTheDisk) {
  std::unique_ptr<MemEnv> mem = MemEnv::Create(4);
  const std::string seg = "/ssd/segments";
  Rig r = MakeRig(SegOptions(mem.get()), Format::Q8_0(), Format::F16(), 64);
  ASSERT_NE(r.tier, nullptr);
  const std::vector<std::vector<int32_t>> old = Entries(8, 0, 5);
  StoreAndSpill(r, old);
  ASSERT_GT(r.tier->Stats().bytes, 0u);
  for (const DirEntry& f : mem->ListDir(seg).value()) ASSERT_TRUE(mem->RemoveFile(seg + "/" + f.name).ok());
  ASSERT_TRUE(mem->RemoveDir(seg).ok());
  // A fetch of a lost entry misses (nothing wrong is served) and the index forgets them all.
  EXPECT_EQ(FetchChecked(r, old[0]), 0u);
  EXPECT_EQ(r.tier->Stats().bytes, 0u);
  EXPECT_EQ(r.tier->Stats().blocks, 0u);
  EXPECT_GT(r.tier->Stats().vanished_files, 0u);
  // The writer makes segments/ again; new blocks are served.
  const std::vector<std::vector<int32_t>> fresh = Entries(4, 50000, 6);
  StoreAndSpill(r, fresh);
  EXPECT_EQ(r.tier->Stats().bytes, OurBytes(*mem, seg));
  EXPECT_GE(FetchChecked(r, fresh[0]), testing::kTierBt);
  // Replaced under the index (a file of the same name, other bytes): Reconcile drops it.
  const std::vector<DirEntry> now = mem->ListDir(seg).value();
  ASSERT_FALSE(now.empty());
  ASSERT_TRUE(mem->WriteFileDurably(seg + "/" + now[0].name, std::vector<uint8_t>(7, 1)).ok());
  EXPECT_EQ(r.tier->Reconcile(), 1u);
  EXPECT_EQ(r.tier->Stats().bytes, OurBytes(*mem, seg) - 7);
}

// Reconcile() over a few thousand version-1 block files on the real filesystem: one stat
// each, timed (the server's /v1/cache/stats pays it per request; /metrics never does, it asks
// ReconcileSoon() instead). ReconcileSoon() returns at once, walks on a writer thread, and
// asks nothing more within its interval.
TEST(SsdTierIds, ReconcileCostOnThousandsOfFilesAndReconcileSoon) {
  char tmpl[] = "/tmp/kvtier_reconcile_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  SsdTierOptions o = TierOptions(Env::Default(), 1ull << 30, 256);
  o.dir = root;
  o.layout = SsdLayout::kBlockFiles;
  o.batch_blocks = 256;
  o.batch_bytes = 64ull << 20;
  Rig r = MakeRig(o, Format::Q8_0(), Format::F16(), 64);
  ASSERT_NE(r.tier, nullptr);
  // 1500 runs of 6..19 tokens, 4 per block: about 5000 blocks, one file each (300 runs,
  // about 1000, in the sanitizer builds).
#ifdef KVTIER_SANITIZE
  constexpr int kParts = 1;
#else
  constexpr int kParts = 5;
#endif
  for (int part = 0; part < kParts; ++part) {
    StoreAndSpill(r, Entries(300, part * 30000, 7 + part));
  }
  const uint64_t files = r.tier->Stats().files;
  ASSERT_GE(files, 600u * kParts);
  double best = 1e9, worst = 0;
  for (int i = 0; i < 5; ++i) {
    Timer t;
    EXPECT_EQ(r.tier->Reconcile(), 0u);
    best = std::min(best, t.Millis());
    worst = std::max(worst, t.Millis());
  }
  std::printf("Reconcile() over %llu files: %.2f ms best, %.2f ms worst of 5 (%.2f us/file)\n",
              static_cast<unsigned long long>(files), best, worst, best * 1e3 / files);
  EXPECT_EQ(r.tier->Stats().files, files);

  // Everything removed under the tier: ReconcileSoon() notices without blocking the caller.
  std::filesystem::remove_all(root + "/blocks");
  Timer t;
  r.tier->ReconcileSoon(0);
  EXPECT_LT(t.Millis(), 200.0);  // a flag and a notify, not a walk
  for (int i = 0; i < 2000 && r.tier->Stats().files > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(r.tier->Stats().files, 0u);
  EXPECT_EQ(r.tier->Stats().bytes, 0u);
  EXPECT_EQ(r.tier->Stats().blocks, 0u);
  EXPECT_EQ(r.tier->Stats().vanished_files, files);
  // Within the interval nothing more is walked: a file vanishing now stays counted.
  StoreAndSpill(r, Entries(2, 900000, 99));
  const uint64_t now_files = r.tier->Stats().files;
  ASSERT_GT(now_files, 0u);
  std::filesystem::remove_all(root + "/blocks");
  r.tier->ReconcileSoon(3600 * 1000);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(r.tier->Stats().files, now_files);
  EXPECT_EQ(r.tier->Reconcile(), now_files);  // the synchronous walk is never rate-limited
  EXPECT_EQ(r.tier->Stats().bytes, 0u);
  r = Rig{};
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace kvtier
