// Test-only helpers for src/tier: a prefix cache over an SsdTier on a given Env, storing and
// spilling entries, and fetches checked bit for bit against the rows the entry was built with.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kvtier/env.h"
#include "kvtier/ssd_tier.h"
#include "prefix/prefix_test_util.h"

namespace kvtier::testing {

inline constexpr KvShape kTierShape{2, 2, 64};
inline constexpr uint32_t kTierBt = 4;

struct Rig {
  std::shared_ptr<BlockPool> pool;
  std::shared_ptr<SsdTier> tier;
  std::unique_ptr<PrefixCache> cache;
};

// The tests' tier options: directory /ssd on `env`, no log lines.
inline SsdTierOptions TierOptions(Env* env, uint64_t max_bytes = 1ull << 30, uint32_t queue = 8) {
  SsdTierOptions o;
  o.dir = "/ssd";
  o.env = env;
  o.max_bytes = max_bytes;
  o.queue_blocks = queue;
  o.log = false;
  return o;
}

inline Result<std::shared_ptr<SsdTier>> OpenTier(Env* env, uint64_t max_bytes = 1ull << 30,
                                                 uint32_t queue = 8) {
  return SsdTier::Open(TierOptions(env, max_bytes, queue));
}

// A cache of `budget_blocks` blocks over a tier opened with `o`; r.tier is null if it failed.
inline Rig MakeRig(const SsdTierOptions& o, Format k, Format v, uint64_t budget_blocks) {
  Rig r;
  r.pool = MakePool(kTierShape, k, v, kTierBt, 64 << 20);
  Result<std::shared_ptr<SsdTier>> t = SsdTier::Open(o);
  if (!t.ok()) return r;
  r.tier = *t;
  PrefixCacheOptions po;
  po.memory_budget_bytes = budget_blocks * r.pool->layout().block_stride;
  po.lower_tier = r.tier;
  r.cache = PrefixCache::Create(std::move(po)).value();
  return r;
}

inline Rig MakeRig(Env* env, Format k, Format v, uint64_t budget_blocks,
                   uint64_t max_bytes = 1ull << 30) {
  Rig r = MakeRig(TierOptions(env, max_bytes), k, v, budget_blocks);
  EXPECT_NE(r.tier, nullptr);
  return r;
}

inline void StoreAndSpill(Rig& r, const std::vector<std::vector<int32_t>>& entries) {
  for (const auto& t : entries) {
    Result<PrefixStoreResult> s = r.cache->Store(kModelA, t, SeqOf(r.pool, t));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
  }
  r.cache->Evict(UINT64_MAX);
  r.tier->Flush();
}

// A fetch of `t` must reuse exactly the rows of its tokens; returns the count reused.
inline uint32_t FetchChecked(Rig& r, const std::vector<int32_t>& t) {
  Result<PrefixFetchResult> f = r.cache->Fetch(kModelA, t, r.pool);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  if (!f.ok()) return 0;
  const uint32_t n = f->reused_tokens;
  EXPECT_EQ(Encoded(f->sequence, n), Expected(r.pool, r.pool, r.pool, t, n));
  EXPECT_TRUE(r.cache->CheckInvariants().ok()) << r.cache->CheckInvariants().ToString();
  return n;
}

// Tokens of `t` the tier's index holds as a chain from its start (its blocks were
// acknowledged: durable under their final names).
inline uint32_t IndexedTokens(SsdTier& tier, const std::vector<int32_t>& t) {
  uint32_t n = 0;
  for (const TierNamespace& ns : tier.Namespaces(kModelA)) {
    uint32_t m = 0;
    for (const TierBlock& b : tier.FindChain(ns, t)) {
      if (b.tokens.size() > t.size() - m ||
          !std::equal(b.tokens.begin(), b.tokens.end(), t.begin() + m)) {
        break;
      }
      m += static_cast<uint32_t>(b.tokens.size());
    }
    n = std::max(n, m);
  }
  return n;
}

// n token runs of 6..19 tokens, run i starting at token base + 100 i.
inline std::vector<std::vector<int32_t>> Entries(int n, int32_t base, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(Range(base + 100 * i, 6 + static_cast<int32_t>(rng() % 14)));
  }
  return out;
}

// What a real filesystem may do before a crash: write directory blocks back on its own, so
// unsynced creations, renames and removals survive (unsynced file bytes still may not). A
// file renamed before its bytes are durable then survives torn under its final name.
inline void LeakDirectoryChanges(MemEnv& mem, const std::string& dir = "/ssd") {
  (void)mem.SyncDir(dir);
  Result<std::vector<DirEntry>> list = mem.ListDir(dir);
  if (!list.ok()) return;
  for (const DirEntry& e : *list) {
    if (e.is_dir) LeakDirectoryChanges(mem, dir + "/" + e.name);
  }
}

// Totals over a series of CrashTrial calls.
struct CrashTrials {
  uint64_t crashes = 0;       // trials whose crash point was reached
  uint64_t acked_tokens = 0;  // tokens indexed (acknowledged) before the crashes
};

// One random-crash trial: a tier opened with `o` (whose env is `env`, over `mem`) stores and
// spills `entries`, `env` crashing at its operation number `crash_at`; directory changes leak
// first when `leak`; a restart in `mode`; then a tier opened again with `o` must serve at
// least every acknowledged token of each entry, bit for bit. `check(rig)` then looks at the
// reopened tier. A trial that crashed while opening the first tier checks nothing.
template <class Check>
void CrashTrial(const SsdTierOptions& o, MemEnv& mem, FaultInjectionEnv& env, Format k,
                Format v, uint64_t crash_at, bool leak, MemEnv::CrashMode mode,
                const std::vector<std::vector<int32_t>>& entries, int trial, CrashTrials& totals,
                Check check) {
  env.SetRule([crash_at](FaultInjectionEnv::Op, uint64_t i, const std::string&) {
    return i == crash_at ? FaultInjectionEnv::Fault::kCrash : FaultInjectionEnv::Fault::kNone;
  });
  std::vector<uint32_t> acked;
  {
    Rig r = MakeRig(o, k, v, 64);
    if (r.tier == nullptr) return;  // crashed while opening
    StoreAndSpill(r, entries);
    for (const auto& t : entries) acked.push_back(IndexedTokens(*r.tier, t));
  }
  totals.crashes += env.crashed();
  if (leak) LeakDirectoryChanges(mem);
  env.Restart(mode);
  env.SetRule(nullptr);
  Rig r = MakeRig(o, k, v, 64);
  ASSERT_NE(r.tier, nullptr) << "trial " << trial;
  for (size_t i = 0; i < entries.size(); ++i) {
    totals.acked_tokens += acked[i];
    EXPECT_GE(FetchChecked(r, entries[i]),
              std::min<uint32_t>(acked[i], static_cast<uint32_t>(entries[i].size() - 1)))
        << "trial " << trial;
  }
  check(r);
}

// One file operation a fault rule saw.
using OpRecord = std::pair<FaultInjectionEnv::Op, std::string>;

// The file operations of a spill, in order: stores `entries` and evicts them while a rule on
// `env` holds the first file opened for writing until every block is queued (so a single
// writer finds its batches full), then releases the writers, waits for them and removes the
// rule. `keep(op, path, log)` says whether (op, path) is appended to the returned log.
template <class Keep>
std::vector<OpRecord> SpillLogged(Rig& r, FaultInjectionEnv& env,
                                  const std::vector<std::vector<int32_t>>& entries, Keep keep) {
  std::mutex mu;
  std::vector<OpRecord> log;
  std::atomic<bool> go{false};
  env.SetRule([&](FaultInjectionEnv::Op op, uint64_t, const std::string& path) {
    while (op == FaultInjectionEnv::Op::kOpenWrite && !go.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::lock_guard<std::mutex> lock(mu);
    if (keep(op, path, log)) log.emplace_back(op, path);
    return FaultInjectionEnv::Fault::kNone;
  });
  for (const auto& t : entries) {
    EXPECT_TRUE(r.cache->Store(kModelA, t, SeqOf(r.pool, t)).ok());
  }
  r.cache->Evict(UINT64_MAX);
  go = true;
  r.tier->Flush();
  env.SetRule(nullptr);
  return log;
}

}  // namespace kvtier::testing
