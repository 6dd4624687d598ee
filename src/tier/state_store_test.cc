// The SSD tier's state snapshots (tier::StateStore through SsdTier::SpillState / FindState) on
// the in-memory Env: written durably and found after a reopen bit for bit, the longest at or
// before the limit, a flipped byte anywhere in a file a counted miss (quarantined) that falls
// back to a shorter snapshot, a crash before the rename leaves nothing half-written, the cap
// evicts least recently used files, and Clear removes them.
#include <gtest/gtest.h>

#include "kvtier/env.h"
#include "kvtier/ssd_tier.h"
#include "kvtier/state_snapshot.h"

namespace kvtier {
namespace {

const ModelFingerprint kModel{0xabc, 0xdef};

std::shared_ptr<const StateSnapshot> Snap(uint32_t position, uint32_t floats = 500) {
  auto s = std::make_shared<StateSnapshot>();
  s->format = 99;
  s->position = position;
  s->sizes = {floats / 2, floats - floats / 2};
  for (uint32_t i = 0; i < floats; ++i) s->data.push_back(0.5f * position - 0.25f * i);
  return s;
}

std::vector<int32_t> Tokens(uint32_t n) {
  std::vector<int32_t> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>(7 * i + 3);
  return t;
}

std::shared_ptr<SsdTier> Open(Env* env, uint64_t max_bytes = 1ull << 30) {
  SsdTierOptions o;
  o.dir = "/ssd";
  o.env = env;
  o.log = false;
  o.max_bytes = max_bytes;
  return SsdTier::Open(o).value();
}

void Spill(SsdTier& t, const std::vector<int32_t>& tokens, uint32_t p, uint32_t floats = 500) {
  const std::span<const int32_t> prefix = std::span<const int32_t>(tokens).first(p);
  t.SpillState(kModel, StateSnapshotKey(kModel, prefix), Snap(p, floats));
}

TEST(SsdStates, SurviveAReopenAndTheLongestAtOrBeforeComesBack) {
  auto mem = MemEnv::Create(1);
  const std::vector<int32_t> t = Tokens(64);
  {
    auto tier = Open(mem.get());
    Spill(*tier, t, 20);
    Spill(*tier, t, 40);
    tier->Flush();
    EXPECT_EQ(tier->Stats().spilled_states, 2u);
  }
  mem->SimulateCrash(MemEnv::CrashMode::kDropUnsynced);  // only synced bytes survive
  auto tier = Open(mem.get());
  EXPECT_EQ(tier->Stats().states, 2u);
  auto s = tier->FindState(kModel, t, 0, 63);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->position, 40u);
  EXPECT_EQ(s->data, Snap(40)->data);
  EXPECT_EQ(s->sizes, Snap(40)->sizes);
  s = tier->FindState(kModel, t, 0, 39);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->position, 20u);
  EXPECT_EQ(tier->FindState(kModel, t, 0, 19), nullptr);
  // Only above min_position: 20 is what the caller has, so nothing is read.
  EXPECT_EQ(tier->FindState(kModel, t, 20, 39), nullptr);
  EXPECT_EQ(tier->FindState(kModel, t, 20, 63)->position, 40u);
  // Other tokens or another model: nothing.
  std::vector<int32_t> other = t;
  other[5] = 1;
  EXPECT_EQ(tier->FindState(kModel, other, 0, 63), nullptr);
  EXPECT_EQ(tier->FindState(ModelFingerprint{1, 1}, t, 0, 63), nullptr);
  EXPECT_EQ(tier->Stats().loaded_states, 3u);
}

TEST(SsdStates, EveryFlippedByteIsACountedMissThatFallsBack) {
  const std::vector<int32_t> t = Tokens(64);
  const std::string path =
      "/ssd/states/" +
      StateSnapshotKey(kModel, std::span<const int32_t>(t).first(40)).ToHex() + ".kvst";
  uint64_t size = 0;
  {
    auto mem = MemEnv::Create(2);
    auto tier = Open(mem.get());
    Spill(*tier, t, 40, 40);
    tier->Flush();
    size = mem->FileSize(path).value();
  }
  ASSERT_GT(size, 48u + 40u);
  for (uint64_t at = 0; at < size; at += 5) {
    auto mem = MemEnv::Create(3);
    {
      auto tier = Open(mem.get());
      Spill(*tier, t, 20, 40);
      Spill(*tier, t, 40, 40);
      tier->Flush();
    }
    // Flip one bit of byte `at` of the longer snapshot's file.
    auto f = mem->NewRandomAccessFile(path).value();
    std::vector<uint8_t> bytes(f->size());
    ASSERT_EQ(f->Read(0, bytes.size(), bytes.data()).value(), bytes.size());
    bytes[at] ^= 0x04;
    {
      auto w = mem->NewWritableFile(path).value();
      ASSERT_TRUE(w->Append(bytes).ok());
      ASSERT_TRUE(w->Sync().ok());
      ASSERT_TRUE(w->Close().ok());
    }
    auto tier = Open(mem.get());
    auto s = tier->FindState(kModel, t, 0, 63);
    ASSERT_NE(s, nullptr) << "byte " << at;
    EXPECT_EQ(s->position, 20u) << "byte " << at << ": the damaged one is never returned";
    const SsdTierStats st = tier->Stats();
    EXPECT_EQ(st.corrupt_states, 1u) << "byte " << at;
    EXPECT_FALSE(mem->FileExists(path)) << "quarantined";
  }
}

TEST(SsdStates, CapEvictsLeastRecentlyUsedAndClearRemovesAll) {
  auto mem = MemEnv::Create(4);
  const std::vector<int32_t> t = Tokens(64);
  const uint64_t one = 48 + Snap(1, 1000)->bytes();
  auto tier = Open(mem.get(), 4 * (3 * one + one / 2));  // states get a quarter: three fit
  for (uint32_t p = 10; p <= 30; p += 10) Spill(*tier, t, p, 1000);
  tier->Flush();
  ASSERT_NE(tier->FindState(kModel, t, 0, 10), nullptr);  // touch 10: 20 is now the oldest
  Spill(*tier, t, 40, 1000);
  tier->Flush();
  SsdTierStats s = tier->Stats();
  EXPECT_EQ(s.states, 3u);
  EXPECT_EQ(s.evicted_states, 1u);
  EXPECT_LE(s.state_bytes, 3 * one);
  auto f = tier->FindState(kModel, t, 0, 25);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->position, 10u) << "20 was evicted";
  ASSERT_TRUE(tier->Clear().ok());
  EXPECT_EQ(tier->Stats().states, 0u);
  EXPECT_EQ(tier->FindState(kModel, t, 0, 63), nullptr);
  EXPECT_TRUE(mem->ListDir("/ssd/states").value().empty());
}

}  // namespace
}  // namespace kvtier
