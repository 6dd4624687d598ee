// RemoteTier against real redis-server processes on loopback ports (label `redis`): hash slots
// against known CRC16 vectors and the server's CLUSTER KEYSLOT, one Redis and a three-master
// cluster shared by two prefix caches (two replicas), MOVED and ASK, and the faults: Redis
// killed and restarted, a value overwritten with garbage, a value deleted between lookup and
// read, 200 ms of added latency. Fetched rows are compared bit for bit with the entry's.
#include "kvtier/remote_tier.h"

#include <random>

#include "kvtier/env.h"
#include "kvtier/ssd_tier.h"
#include "prefix/prefix_test_util.h"
#include "remote/redis_test_util.h"
#include "remote/remote_keys.h"

namespace kvtier {
namespace {

using remote::HashSlot;
using testing::Encoded;
using testing::Expected;
using testing::kModelA;
using testing::MakePool;
using testing::Range;
using testing::SeqOf;

constexpr KvShape kShape{2, 2, 64};
constexpr uint32_t kBt = 4;

// One replica: an active pool and a prefix cache over a RemoteTier at `url`, write-through.
struct Replica {
  explicit Replica(const std::string& url, uint32_t deadline_ms = 200, uint64_t budget_blocks = 64) {
    pool = MakePool(kShape, Format::Q8_0(), Format::Q8_0(), kBt, 64 << 20);
    RemoteTierOptions o;
    o.url = url;
    o.deadline_ms = deadline_ms;
    o.backoff_min_ms = 20;
    o.backoff_max_ms = 100;
    o.namespace_refresh_ms = 0;
    o.log = false;
    o.batch_blocks = 4;
    tier = RemoteTier::Open(o).value();
    PrefixCacheOptions po;
    po.memory_budget_bytes = budget_blocks * pool->layout().block_stride;
    po.lower_tier = tier;
    po.write_policy = CacheWritePolicy::kWriteThrough;
    cache = PrefixCache::Create(po).value();
  }
  void Store(const std::vector<int32_t>& t) {
    ASSERT_TRUE(cache->Store(kModelA, t, SeqOf(pool, t)).ok());
  }
  // Tokens reused by a fetch of `t`, whose rows must be exactly the entry's.
  uint32_t Fetch(const std::vector<int32_t>& t) {
    Result<PrefixFetchResult> f = cache->Fetch(kModelA, t, pool);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    if (!f.ok()) return 0;
    const uint32_t n = f->reused_tokens;
    EXPECT_EQ(Encoded(f->sequence, n), Expected(pool, pool, pool, t, n));
    return n;
  }
  std::shared_ptr<BlockPool> pool;
  std::shared_ptr<RemoteTier> tier;
  std::unique_ptr<PrefixCache> cache;
};

TEST(RemoteSlots, Crc16AndHashSlotsMatchRedis) {
  // CRC-16/XMODEM's check value and the slots Redis Cluster's specification gives.
  EXPECT_EQ(remote::Crc16("123456789"), 0x31C3);
  EXPECT_EQ(HashSlot("foo"), 12182);
  EXPECT_EQ(HashSlot("bar"), 5061);
  EXPECT_EQ(HashSlot("{user1000}.following"), HashSlot("user1000"));
  EXPECT_EQ(HashSlot("{user1000}.followers"), HashSlot("user1000"));
  EXPECT_EQ(HashSlot("foo{}{bar}"), remote::Crc16("foo{}{bar}") & 16383);  // empty tag: whole
  EXPECT_EQ(HashSlot("foo{{bar}}zap"), HashSlot("{bar"));
  EXPECT_EQ(HashSlot("foo{bar}{zap}"), HashSlot("bar"));
}

TEST(RemoteSlots, HashSlotsAgreeWithClusterKeyslot) {
  KVTIER_REQUIRE_REDIS();
  testing::RedisProcess r(true);  // cluster mode answers CLUSTER KEYSLOT without slots
  std::mt19937_64 rng(7);
  for (int i = 0; i < 300; ++i) {
    std::string key = remote::BlockRedisKey(BlockKey{rng(), rng()}, BlockKey{rng(), rng()});
    if (i % 3 == 0) {
      std::string tagged = "{";
      tagged += std::to_string(rng() % 1000);
      tagged += "}";
      tagged += key;
      key = std::move(tagged);
    }
    remote::RedisResult k = r.Cmd({"CLUSTER", "KEYSLOT", key});
    ASSERT_TRUE(k.status.ok()) << k.status.ToString();
    EXPECT_EQ(k.integer(), HashSlot(key)) << key;
  }
}

TEST(RemoteTier, BadUrlsAreRejectedNamingThePart) {
  for (const char* bad : {"http://x:1", "redis://", "redis://host", "redis://h:0",
                          "redis://h:1,h2", "redis://h:99999"}) {
    RemoteTierOptions o;
    o.url = bad;
    Result<std::shared_ptr<RemoteTier>> t = RemoteTier::Open(o);
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find("remote cache"), std::string::npos);
  }
}

const std::vector<std::vector<int32_t>> kEntries = {Range(1, 19), Range(500, 13),
                                                    testing::Concat(Range(1, 8), {9, 9, 9}),
                                                    Range(2000, 64)};

// Replica A stores; replica B (its own RAM, same Redis) is served every entry from Redis.
void SharedByTwoReplicas(const std::string& url) {
  Replica a(url), b(url);
  for (const auto& t : kEntries) a.Store(t);
  a.tier->Flush();
  const RemoteTierStats sa = a.tier->Stats();
  EXPECT_EQ(sa.written_blocks, 5u + 4u + 1u + 16u);
  EXPECT_EQ(sa.write_errors, 0u);
  for (const auto& t : kEntries) EXPECT_EQ(b.Fetch(t), t.size() - 1);
  const RemoteTierStats sb = b.tier->Stats();
  EXPECT_EQ(sb.hits, 26u);
  EXPECT_EQ(b.cache->Stats().promoted_blocks, 26u);
  for (uint64_t m : sb.misses_by) EXPECT_EQ(m, 0u);
  // Now in B's RAM: fetched again without Redis.
  for (const auto& t : kEntries) EXPECT_EQ(b.Fetch(t), t.size() - 1);
  EXPECT_EQ(b.tier->Stats().hits, 26u);
}

TEST(RemoteTier, TwoReplicasShareOneRedis) {
  KVTIER_REQUIRE_REDIS();
  testing::RedisProcess r;
  SharedByTwoReplicas(r.url());
  Replica c(r.url());
  Result<RemoteScan> scan = c.tier->Scan(true);
  ASSERT_TRUE(scan.ok()) << scan.status().ToString();
  EXPECT_EQ(scan->blocks, 26u);
  EXPECT_EQ(scan->good, 26u);
  EXPECT_EQ(scan->bad, 0u);
  ASSERT_EQ(scan->namespaces.size(), 1u);
  EXPECT_EQ(scan->namespaces[0].second, 26u);
  Result<uint64_t> cleared = c.tier->Clear();
  ASSERT_TRUE(cleared.ok());
  EXPECT_EQ(*cleared, 27u);  // the blocks and the namespace set
  EXPECT_EQ(r.Cmd({"DBSIZE"}).integer(), 0);
}

TEST(RemoteTier, TwoReplicasShareAThreeMasterClusterWithKeysSpread) {
  KVTIER_REQUIRE_REDIS();
  testing::RedisCluster cl;
  SharedByTwoReplicas(cl.url());
  uint64_t total = 0;
  for (const auto& n : cl.nodes) {
    const long long keys = n->Cmd({"DBSIZE"}).integer();
    EXPECT_GT(keys, 0) << n->addr() << " holds none of the keys";
    total += static_cast<uint64_t>(keys);
  }
  EXPECT_EQ(total, 27u);
  Replica c(cl.url());
  Result<RemoteScan> scan = c.tier->Scan(true);
  ASSERT_TRUE(scan.ok()) << scan.status().ToString();
  EXPECT_EQ(scan->masters.size(), 3u);
  EXPECT_EQ(scan->good, 26u);
  EXPECT_TRUE(c.tier->Stats().cluster);
}

// The slot of `key` moves from its master to another: first ASK (migrating), then MOVED (the
// client's map is stale). Both are followed and counted.
TEST(RemoteTier, AskAndMovedAreFollowed) {
  KVTIER_REQUIRE_REDIS();
  testing::RedisCluster cl;
  auto client = remote::RedisClient::Create(cl.url()).value();
  const std::string key = "kvt:test:moving";
  const uint16_t slot = HashSlot(key);
  ASSERT_TRUE(client->Run({{{"SET", "warmup", "1"}}})[0].status.ok());  // reads the map
  // Owner and another master, with their node ids.
  std::string owner_id, target_id;
  testing::RedisProcess* owner = nullptr;
  testing::RedisProcess* target = nullptr;
  for (const auto& n : cl.nodes) {
    const std::string id(n->Cmd({"CLUSTER", "MYID"}).str());
    const remote::RedisResult probe = n->Cmd({"GET", key});
    if (!probe.is_error()) {
      owner = n.get();
      owner_id = id;
    }
  }
  ASSERT_NE(owner, nullptr);
  for (const auto& n : cl.nodes) {
    if (n.get() != owner) {
      target = n.get();
      target_id = std::string(n->Cmd({"CLUSTER", "MYID"}).str());
      break;
    }
  }
  const std::string s = std::to_string(slot);
  ASSERT_FALSE(target->Cmd({"CLUSTER", "SETSLOT", s, "IMPORTING", owner_id}).is_error());
  ASSERT_FALSE(owner->Cmd({"CLUSTER", "SETSLOT", s, "MIGRATING", target_id}).is_error());
  // The key is on neither: the owner answers ASK, the client asks the target.
  std::vector<remote::RedisResult> w = client->Run({{{"SET", key, "value"}}});
  ASSERT_TRUE(w[0].status.ok()) << w[0].status.ToString();
  EXPECT_FALSE(w[0].is_error()) << w[0].str();
  EXPECT_GE(client->Stats().ask, 1u);
  // Finish the move everywhere; the client's map still names the owner: MOVED.
  for (const auto& n : cl.nodes) {
    ASSERT_FALSE(n->Cmd({"CLUSTER", "SETSLOT", s, "NODE", target_id}).is_error());
  }
  std::vector<remote::RedisResult> g = client->Run({{{"GET", key}}});
  ASSERT_TRUE(g[0].status.ok());
  EXPECT_EQ(g[0].str(), "value");
  EXPECT_GE(client->Stats().moved, 1u);
  // The map was updated: the next read goes straight to the target.
  const uint64_t moved = client->Stats().moved;
  EXPECT_EQ(client->Run({{{"GET", key}}})[0].str(), "value");
  EXPECT_EQ(client->Stats().moved, moved);
}

TEST(RemoteTier, KilledAndRestartedRedisIsAMissThenAHitAgain) {
  KVTIER_REQUIRE_REDIS();
  testing::RedisProcess r;
  Replica a(r.url()), b(r.url());
  const std::vector<int32_t> t = Range(1, 40);
  a.Store(t);
  a.tier->Flush();
  r.Kill();
  // Down: misses, never errors; the fetch computes nothing wrong.
  EXPECT_EQ(b.Fetch(t), 0u);
  const RemoteTierStats down = b.tier->Stats();
  EXPECT_GE(down.misses_by[static_cast<int>(RemoteMiss::kUnavailable)], 1u);
  // Writes while down fail and are counted, never block.
  const std::vector<int32_t> u = Range(900, 12);
  a.Store(u);
  a.tier->Flush();
  EXPECT_GE(a.tier->Stats().write_errors, 1u);
  // Restarted (empty: persistence is off): a miss, then A's next entry is shared again.
  r.Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(150));  // past the backoff
  EXPECT_EQ(b.Fetch(t), 0u);
  const std::vector<int32_t> v = Range(3000, 21);
  a.Store(v);
  a.tier->Flush();
  EXPECT_EQ(b.Fetch(v), v.size() - 1);
}

TEST(RemoteTier, GarbageValuesAndVanishedValuesAreMisses) {
  KVTIER_REQUIRE_REDIS();
  testing::RedisProcess r;
  Replica a(r.url());
  const std::vector<int32_t> t = Range(1, 24);  // 6 blocks
  a.Store(t);
  a.tier->Flush();
  // The third block's value: garbage of the same length, then a fetch on another replica.
  const TierNamespace ns = a.tier->Namespaces(kModelA).at(0);
  BlockKey k = ns.key;
  std::vector<BlockKey> keys;
  for (size_t i = 0; i < 6; ++i) {
    k = ChainBlockKey(k, std::span<const int32_t>(t).subspan(i * kBt, kBt));
    keys.push_back(k);
  }
  const std::string third = remote::BlockRedisKey(ns.key, keys[2]);
  const long long n = r.Cmd({"STRLEN", third}).integer();
  ASSERT_GT(n, 0);
  std::string garbage(static_cast<size_t>(n), '\x5a');
  ASSERT_FALSE(r.Cmd({"SET", third, garbage}).is_error());
  Replica b(r.url());
  EXPECT_EQ(b.Fetch(t), 2u * kBt) << "the two blocks before the garbage";
  RemoteTierStats s = b.tier->Stats();
  EXPECT_EQ(s.misses_by[static_cast<int>(RemoteMiss::kCorrupt)], 1u);
  EXPECT_EQ(r.Cmd({"EXISTS", third}).integer(), 0) << "a corrupt value is removed";
  // A value of another format version (the header's version field raised): not used.
  const std::string fourth = remote::BlockRedisKey(ns.key, keys[3]);
  remote::RedisResult v = r.Cmd({"GET", fourth});
  std::string newer(v.str());
  newer[8] = 9;  // version field (little-endian u32 at byte 8)
  ASSERT_FALSE(r.Cmd({"SET", fourth, newer}).is_error());
  // Another replica writes the first three blocks again, so the chain reaches the fourth.
  Replica c(r.url());
  c.Store(Range(1, 12));  // blocks 0..2 written by C (the third again)
  c.tier->Flush();
  Replica d(r.url());
  EXPECT_EQ(d.Fetch(t), 3u * kBt);
  EXPECT_EQ(d.tier->Stats().misses_by[static_cast<int>(RemoteMiss::kOtherVersion)], 1u);
  // Deleted between the lookup (FindChain) and the read (Load): vanished, a miss.
  Replica e(r.url());
  const std::vector<TierBlock> chain = e.tier->FindChain(ns, t);
  ASSERT_EQ(chain.size(), 6u);
  ASSERT_EQ(r.Cmd({"DEL", remote::BlockRedisKey(ns.key, keys[1])}).integer(), 1);
  std::vector<BlockId> ids;
  ASSERT_TRUE(e.pool->Allocate(1, KvOwner::kTier, &ids, "test").ok());
  const Status st = e.tier->Load(ns, keys[1], *e.pool, ids[0]);
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
  EXPECT_EQ(e.tier->Stats().misses_by[static_cast<int>(RemoteMiss::kVanished)], 1u);
  e.pool->Unref(ids, KvOwner::kTier);
  // Through the cache: evicted between the index lookup and the read.
  Replica f(r.url());
  EXPECT_EQ(f.Fetch(t), 1u * kBt);
}

TEST(RemoteTier, AddedLatencyPastTheDeadlineIsAMiss) {
  KVTIER_REQUIRE_REDIS();
  testing::RedisProcess r;
  Replica a(r.url());
  const std::vector<int32_t> t = Range(1, 40);
  a.Store(t);
  a.tier->Flush();
  testing::LatencyProxy slow(r.port(), 200);
  Replica b(slow.url(), /*deadline_ms=*/50);
  EXPECT_EQ(b.Fetch(t), 0u);
  const RemoteTierStats s = b.tier->Stats();
  EXPECT_GE(s.timeouts, 1u);
  EXPECT_GE(s.misses_by[static_cast<int>(RemoteMiss::kUnavailable)], 1u);
  // With a deadline above the latency the same path serves the blocks.
  Replica c(slow.url(), /*deadline_ms=*/1000);
  EXPECT_EQ(c.Fetch(t), t.size() - 1);
}

TEST(RemoteTier, ReadAheadFetchesTheRestOfALongChainInBatches) {
  KVTIER_REQUIRE_REDIS();
  testing::RedisProcess r;
  Replica a(r.url(), 200, 512);
  const std::vector<int32_t> t = Range(1, 4 * 200 + 3);  // 200 full blocks and a tail
  a.Store(t);
  a.tier->Flush();
  Replica b(r.url(), 200, 512);
  EXPECT_EQ(b.Fetch(t), t.size() - 1);
  const RemoteTierStats s = b.tier->Stats();
  EXPECT_EQ(s.hits, 201u);
  EXPECT_GT(s.read_ahead_blocks, 0u);
  // Far fewer round trips than blocks: batches of batch_blocks (4) plus the lookups.
  EXPECT_LE(s.round_trips, 201u / 4 + 10) << "round trips " << s.round_trips;
}

// SSD, then remote: a write-through store reaches both; a replica whose SSD holds the first
// half of a prompt reads that half from disk and only the rest from Redis.
TEST(TierStack, SsdFirstThenRemote) {
  KVTIER_REQUIRE_REDIS();
  testing::RedisProcess r;
  auto stacked = [&](Env* env, std::shared_ptr<SsdTier>* ssd, std::shared_ptr<RemoteTier>* rem,
                     const std::shared_ptr<BlockPool>& pool) {
    SsdTierOptions so;
    so.dir = "/ssd";
    so.env = env;
    so.log = false;
    *ssd = SsdTier::Open(so).value();
    RemoteTierOptions ro;
    ro.url = r.url();
    ro.namespace_refresh_ms = 0;
    ro.log = false;
    *rem = RemoteTier::Open(ro).value();
    PrefixCacheOptions po;
    po.memory_budget_bytes = 64 * pool->layout().block_stride;
    po.lower_tier = std::make_shared<TierStack>(std::vector<std::shared_ptr<LowerTier>>{*ssd, *rem});
    po.write_policy = CacheWritePolicy::kWriteThrough;
    return PrefixCache::Create(po).value();
  };
  std::shared_ptr<BlockPool> pool = MakePool(kShape, Format::Q8_0(), Format::Q8_0(), kBt, 64 << 20);
  const std::vector<int32_t> t = Range(7, 40);  // 10 blocks
  const std::vector<int32_t> half = Range(7, 20);  // its first 5 blocks
  std::unique_ptr<MemEnv> env_a = MemEnv::Create(1), env_b = MemEnv::Create(2);
  {
    std::shared_ptr<SsdTier> ssd;
    std::shared_ptr<RemoteTier> rem;
    std::unique_ptr<PrefixCache> a = stacked(env_a.get(), &ssd, &rem, pool);
    ASSERT_TRUE(a->Store(kModelA, t, SeqOf(pool, t)).ok());
    ssd->Flush();
    rem->Flush();
    EXPECT_EQ(ssd->Stats().blocks, 10u);
    EXPECT_EQ(rem->Stats().written_blocks, 10u);
  }
  // B's SSD holds the first half (its own earlier store); Redis holds everything.
  std::shared_ptr<SsdTier> ssd;
  std::shared_ptr<RemoteTier> rem;
  std::unique_ptr<PrefixCache> b = stacked(env_b.get(), &ssd, &rem, pool);
  ASSERT_TRUE(b->Store(kModelA, half, SeqOf(pool, half)).ok());
  ssd->Flush();
  rem->Flush();
  b->Clear();
  Result<PrefixFetchResult> f = b->Fetch(kModelA, t, pool);
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(f->reused_tokens, t.size() - 1);
  EXPECT_EQ(Encoded(f->sequence, f->reused_tokens), Expected(pool, pool, pool, t, f->reused_tokens));
  EXPECT_EQ(ssd->Stats().loaded_blocks, 5u);
  EXPECT_EQ(rem->Stats().hits, 5u);
}

// State snapshots through the stack (no Redis needed): a spill reaches every tier; a find
// takes the longest snapshot any tier has at or before the limit.
TEST(TierStack, StateSnapshotsGoToEveryTierAndTheLongestComesBack) {
  auto a = std::make_shared<testing::StateOnlyTier>(),
       b = std::make_shared<testing::StateOnlyTier>();
  TierStack stack({a, b});
  auto snap = [](uint32_t p) {
    auto s = std::make_shared<StateSnapshot>();
    s->format = 1;
    s->position = p;
    return std::shared_ptr<const StateSnapshot>(s);
  };
  const std::vector<int32_t> t = Range(1, 50);
  stack.SpillState(ModelFingerprint{1, 2}, BlockKey{3, 4}, snap(10));
  EXPECT_EQ(a->kept.size(), 1u);
  EXPECT_EQ(b->kept.size(), 1u);
  b->kept[30] = snap(30);  // only the second tier has the longer one
  auto found = stack.FindState(ModelFingerprint{1, 2}, t, 0, 40);
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->position, 30u);
  found = stack.FindState(ModelFingerprint{1, 2}, t, 0, 20);
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->position, 10u);
  EXPECT_EQ(stack.FindState(ModelFingerprint{1, 2}, t, 0, 5), nullptr);
  // Above the caller's position only: the second tier's 30 is above 10, the first's 10 is not.
  EXPECT_EQ(stack.FindState(ModelFingerprint{1, 2}, t, 10, 20), nullptr);
  found = stack.FindState(ModelFingerprint{1, 2}, t, 10, 40);
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->position, 30u);
  EXPECT_EQ(a->asked.back(), std::make_pair(10u, 40u));
  EXPECT_EQ(b->asked.back(), std::make_pair(10u, 40u));
}

}  // namespace
}  // namespace kvtier
