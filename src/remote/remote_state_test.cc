// RemoteTier's recurrent-state snapshots against a real redis-server (label `redis`): one
// replica stores snapshots through its prefix cache (write-through), another with only the
// Redis in common finds the longest one at or before a limit along its tokens, bit for bit;
// faults (a value truncated, a payload bit flipped, another version, a value deleted) are
// counted misses that fall back to the next shorter snapshot, never a wrong one; `cache verify
// --remote` reads every snapshot back; the same through a three-master Redis Cluster.
#include <algorithm>
#include <cstring>
#include <iterator>

#include "base/crc32c.h"
#include "kvtier/remote_tier.h"
#include "prefix/prefix_test_util.h"
#include "remote/redis_test_util.h"
#include "remote/remote_state.h"
#include "tier/state_store.h"

namespace kvtier {
namespace {

using testing::kModelA;
using testing::Range;

// A snapshot at `position` whose values depend on it: [3 tensors] of 5, 7 and 11 values.
std::shared_ptr<const StateSnapshot> Snap(uint32_t position) {
  auto s = std::make_shared<StateSnapshot>();
  s->format = 77;
  s->position = position;
  s->sizes = {5, 7, 11};
  for (uint32_t i = 0; i < 23; ++i) s->data.push_back(0.25f * static_cast<float>(i) - position);
  return s;
}

struct StateReplica {
  explicit StateReplica(const std::string& url) {
    RemoteTierOptions o;
    o.url = url;
    o.backoff_min_ms = 20;
    o.backoff_max_ms = 100;
    o.namespace_refresh_ms = 0;
    o.log = false;
    tier = RemoteTier::Open(o).value();
    PrefixCacheOptions po;
    po.memory_budget_bytes = 1 << 20;
    po.lower_tier = tier;
    po.write_policy = CacheWritePolicy::kWriteThrough;
    cache = PrefixCache::Create(po).value();
  }
  std::shared_ptr<RemoteTier> tier;
  std::unique_ptr<PrefixCache> cache;
};

std::string RedisKeyOf(const std::vector<int32_t>& t, uint32_t p) {
  return remote::StateRedisKey(StateSnapshotKey(kModelA, std::span<const int32_t>(t).first(p)));
}

int Misses(const RemoteTierStats& s, RemoteMiss m) {
  return static_cast<int>(s.state_misses_by[static_cast<int>(m)]);
}

TEST(RemoteState, AnotherReplicaFindsTheLongestSnapshotAtOrBeforeTheLimit) {
  KVTIER_REQUIRE_REDIS();
  testing::RedisProcess r;
  const std::vector<int32_t> t = Range(1, 40);
  {
    StateReplica a(r.url());
    for (uint32_t p : {8u, 20u, 33u}) {
      ASSERT_TRUE(a.cache->StoreState(kModelA, std::span<const int32_t>(t).first(p), Snap(p)).ok());
    }
    a.tier->Flush();
    const RemoteTierStats s = a.tier->Stats();
    EXPECT_EQ(s.state_written, 3u);
    EXPECT_GT(s.state_written_bytes, 3 * Snap(8)->bytes());
  }
  StateReplica b(r.url());
  auto found = b.tier->FindState(kModelA, t, 0, 39);
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->position, 33u);
  EXPECT_EQ(found->sizes, Snap(33)->sizes);
  EXPECT_EQ(found->data, Snap(33)->data);
  found = b.tier->FindState(kModelA, t, 0, 32);
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->position, 20u);
  // Tokens that differ from the 15th on: only the snapshot at 8 is of their prefix.
  std::vector<int32_t> other = t;
  other[14] = 999;
  found = b.tier->FindState(kModelA, other, 0, 39);
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->position, 8u);
  EXPECT_EQ(b.tier->FindState(kModelA, t, 0, 7), nullptr);
  EXPECT_EQ(b.tier->FindState(testing::kModelB, t, 0, 39), nullptr);
  const RemoteTierStats s = b.tier->Stats();
  EXPECT_EQ(s.state_hits, 3u);
  EXPECT_EQ(s.state_misses_by, (std::array<uint64_t, kNumRemoteMisses>{}));

  // Through the prefix cache of a third replica: the fetch's rule takes the remote snapshot
  // (no K/V was stored here, so it reuses nothing, but it asks and counts).
  StateReplica c(r.url());
  EXPECT_EQ(c.tier->FindState(kModelA, t, 0, 40)->position, 33u);
  EXPECT_EQ(r.Cmd({"SCARD", remote::StatePositionsKey(kModelA)}).integer(), 3);
  const Result<RemoteScan> scan = c.tier->Scan(false);
  ASSERT_TRUE(scan.ok()) << scan.status().ToString();
  EXPECT_EQ(scan->states, 3u);
  EXPECT_EQ(scan->other_keys, 0u);
}

TEST(RemoteState, CorruptTruncatedOtherVersionAndVanishedValuesAreCountedMisses) {
  KVTIER_REQUIRE_REDIS();
  testing::RedisProcess r;
  const std::vector<int32_t> t = Range(1, 40);
  StateReplica a(r.url());
  for (uint32_t p : {5u, 10u, 20u, 30u}) {
    ASSERT_TRUE(a.cache->StoreState(kModelA, std::span<const int32_t>(t).first(p), Snap(p)).ok());
  }
  a.tier->Flush();
  // 30: truncated by 4 bytes; 20: one payload bit flipped; 10: the record version raised.
  const std::string k30 = RedisKeyOf(t, 30), k20 = RedisKeyOf(t, 20), k10 = RedisKeyOf(t, 10);
  std::string v = std::string(r.Cmd({"GET", k30}).str());
  ASSERT_GT(v.size(), 100u);
  ASSERT_FALSE(r.Cmd({"SET", k30, v.substr(0, v.size() - 4)}).is_error());
  v = std::string(r.Cmd({"GET", k20}).str());
  v[v.size() - 9] ^= 0x10;  // a value byte of the last tensor
  ASSERT_FALSE(r.Cmd({"SET", k20, v}).is_error());
  v = std::string(r.Cmd({"GET", k10}).str());
  v[4] = 9;  // version (u32 at byte 4), with the header CRC (bytes [0, 44) at 44) made right
  const uint32_t crc = Crc32c({reinterpret_cast<const uint8_t*>(v.data()), 44});
  std::memcpy(v.data() + 44, &crc, 4);  // little-endian host
  ASSERT_FALSE(r.Cmd({"SET", k10, v}).is_error());

  StateReplica b(r.url());
  auto found = b.tier->FindState(kModelA, t, 0, 39);
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->position, 5u) << "the only intact snapshot";
  EXPECT_EQ(found->data, Snap(5)->data);
  RemoteTierStats s = b.tier->Stats();
  EXPECT_EQ(Misses(s, RemoteMiss::kCorrupt), 2);
  EXPECT_EQ(Misses(s, RemoteMiss::kOtherVersion), 1);
  EXPECT_EQ(s.state_hits, 1u);
  for (const std::string& k : {k30, k20}) {
    EXPECT_EQ(r.Cmd({"EXISTS", k}).integer(), 0) << "a corrupt value is removed: " << k;
  }
  EXPECT_EQ(r.Cmd({"EXISTS", k10}).integer(), 1) << "another version's value is left alone";
  // A deleted value whose position is still listed is not a candidate (EXISTS says so).
  ASSERT_EQ(r.Cmd({"DEL", RedisKeyOf(t, 5)}).integer(), 1);
  EXPECT_EQ(b.tier->FindState(kModelA, t, 0, 39), nullptr);
  // Garbage that is not a record at all, under a listed key.
  ASSERT_FALSE(r.Cmd({"SET", RedisKeyOf(t, 5), "not a snapshot"}).is_error());
  EXPECT_EQ(b.tier->FindState(kModelA, t, 0, 39), nullptr);
  s = b.tier->Stats();
  EXPECT_EQ(Misses(s, RemoteMiss::kCorrupt), 3);
  EXPECT_EQ(Misses(s, RemoteMiss::kOtherVersion), 3) << "the value at 10, read each time";
}

// `kvtier cache verify --remote` (RemoteTier::Scan(true)) reads every snapshot value back:
// intact ones verify, a flipped payload bit and a truncated value are counted and removed,
// another version is left alone.
TEST(RemoteState, VerifyReadsEverySnapshotBackAndRemovesCorruptOnes) {
  KVTIER_REQUIRE_REDIS();
  testing::RedisProcess r;
  const std::vector<int32_t> t = Range(1, 40);
  StateReplica a(r.url());
  for (uint32_t p : {5u, 10u, 20u, 30u}) {
    ASSERT_TRUE(a.cache->StoreState(kModelA, std::span<const int32_t>(t).first(p), Snap(p)).ok());
  }
  a.tier->Flush();
  Result<RemoteScan> scan = a.tier->Scan(true);
  ASSERT_TRUE(scan.ok()) << scan.status().ToString();
  EXPECT_EQ(scan->states, 4u);
  EXPECT_EQ(scan->state_good, 4u);
  EXPECT_EQ(scan->state_bad, 0u);
  EXPECT_EQ(scan->state_bytes, 4 * (tier::kStateFileHeaderBytes + Snap(5)->bytes()));
  const std::string k30 = RedisKeyOf(t, 30), k20 = RedisKeyOf(t, 20), k10 = RedisKeyOf(t, 10);
  std::string v = std::string(r.Cmd({"GET", k20}).str());
  v[v.size() - 9] ^= 0x10;  // a value byte of the last tensor
  ASSERT_FALSE(r.Cmd({"SET", k20, v}).is_error());
  v = std::string(r.Cmd({"GET", k30}).str());
  ASSERT_FALSE(r.Cmd({"SET", k30, v.substr(0, 40)}).is_error());  // shorter than the header
  v = std::string(r.Cmd({"GET", k10}).str());
  v[4] = 9;  // another version, its header CRC made right
  const uint32_t crc = Crc32c({reinterpret_cast<const uint8_t*>(v.data()), 44});
  std::memcpy(v.data() + 44, &crc, 4);  // little-endian host
  ASSERT_FALSE(r.Cmd({"SET", k10, v}).is_error());
  scan = a.tier->Scan(true);
  ASSERT_TRUE(scan.ok()) << scan.status().ToString();
  EXPECT_EQ(scan->states, 4u);
  EXPECT_EQ(scan->state_good, 1u) << "only 5 is intact";
  EXPECT_EQ(scan->state_bad, 2u) << "20 (bit flip) and 30 (truncated)";
  EXPECT_EQ(r.Cmd({"EXISTS", k20}).integer(), 0) << "a corrupt value is removed";
  EXPECT_EQ(r.Cmd({"EXISTS", k30}).integer(), 0);
  EXPECT_EQ(r.Cmd({"EXISTS", k10}).integer(), 1) << "another version is left alone";
  scan = a.tier->Scan(true);
  ASSERT_TRUE(scan.ok());
  EXPECT_EQ(scan->states, 2u);
  EXPECT_EQ(scan->state_bad, 0u);
}

// Snapshots through a three-master Redis Cluster: every command names one key (SET / SADD /
// SMEMBERS / EXISTS / GET / DEL), so no hash tags are needed and one model's snapshots spread
// over the masters; another replica finds the longest along its tokens, bit for bit, and
// verify reads each back from its master.
TEST(RemoteState, ThroughAThreeMasterClusterSnapshotsSpreadAndComeBack) {
  KVTIER_REQUIRE_REDIS();
  testing::RedisCluster cl;
  const std::vector<int32_t> t = Range(1, 64);
  const std::vector<uint32_t> positions = {4, 9, 15, 22, 30, 37, 45, 52, 60};
  {
    StateReplica a(cl.url());
    for (uint32_t p : positions) {
      ASSERT_TRUE(
          a.cache->StoreState(kModelA, std::span<const int32_t>(t).first(p), Snap(p)).ok());
    }
    a.tier->Flush();
    EXPECT_EQ(a.tier->Stats().state_written, positions.size());
    EXPECT_EQ(a.tier->Stats().state_write_errors, 0u);
  }
  int masters_with_keys = 0;
  long long total = 0;
  for (const auto& n : cl.nodes) {
    const long long keys = n->Cmd({"DBSIZE"}).integer();
    masters_with_keys += keys > 0;
    total += keys;
  }
  EXPECT_EQ(total, static_cast<long long>(positions.size()) + 1) << "snapshots + positions set";
  EXPECT_GE(masters_with_keys, 2) << "one model's snapshots spread over the masters";
  StateReplica b(cl.url());
  for (uint32_t limit : {63u, 59u, 44u, 10u, 4u}) {
    const uint32_t want = *std::prev(std::upper_bound(positions.begin(), positions.end(), limit));
    auto found = b.tier->FindState(kModelA, t, 0, limit);
    ASSERT_NE(found, nullptr) << limit;
    EXPECT_EQ(found->position, want) << limit;
    EXPECT_EQ(found->data, Snap(want)->data);
  }
  EXPECT_TRUE(b.tier->Stats().cluster);
  EXPECT_EQ(b.tier->FindState(kModelA, t, 0, 3), nullptr);
  EXPECT_EQ(b.tier->FindState(kModelA, t, 60, 63), nullptr) << "nothing above 60";
  for (uint64_t m : b.tier->Stats().state_misses_by) EXPECT_EQ(m, 0u);
  // One value damaged on whichever master holds it: verify reports and removes it.
  auto client = remote::RedisClient::Create(cl.url()).value();
  const std::string k = RedisKeyOf(t, 45);
  std::vector<remote::RedisResult> got = client->Run({{{"GET", k}}});
  ASSERT_TRUE(got[0].status.ok());
  std::string v(got[0].str());
  ASSERT_GT(v.size(), 100u);
  v[60] ^= 0x01;
  ASSERT_TRUE(client->Run({{{"SET", k, v}}})[0].status.ok());
  const Result<RemoteScan> scan = b.tier->Scan(true);
  ASSERT_TRUE(scan.ok()) << scan.status().ToString();
  EXPECT_EQ(scan->masters.size(), 3u);
  EXPECT_EQ(scan->states, positions.size());
  EXPECT_EQ(scan->state_good, positions.size() - 1);
  EXPECT_EQ(scan->state_bad, 1u);
  EXPECT_EQ(client->Run({{{"EXISTS", k}}})[0].integer(), 0);
  StateReplica c(cl.url());
  EXPECT_EQ(c.tier->FindState(kModelA, t, 0, 50)->position, 37u) << "45 is gone";
}

}  // namespace
}  // namespace kvtier
