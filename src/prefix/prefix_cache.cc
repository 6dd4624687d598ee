// PrefixCache (kvtier/prefix_cache.h): locking, namespaces, budget, conversions, statistics
// around the RadixTree (radix_tree.h). One mutex guards the tree and the counters; format
// conversions run outside it on blocks the call holds references to.
#include "kvtier/prefix_cache.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "base/sysinfo.h"
#include "kvtier/kv_io.h"
#include "prefix/prefix_cache_impl.h"

namespace kvtier {

std::string_view PrefixMatchKindName(PrefixMatchKind k) {
  switch (k) {
    case PrefixMatchKind::kMiss: return "miss";
    case PrefixMatchKind::kExact: return "exact";
    case PrefixMatchKind::kPrefix: return "prefix";
    case PrefixMatchKind::kSupersequence: return "supersequence";
    case PrefixMatchKind::kLcp: return "lcp";
  }
  return "unknown";
}

Result<Format> PrefixStoreFormat(int bits, int group_size) {
  if (bits != 8 && bits != 4) {
    return Status::InvalidArgument("kv cache quantization bits: expected 8 or 4, got " +
                                   std::to_string(bits));
  }
  const Format f = Format::Affine(bits, group_size, DType::kF16);
  KVTIER_RETURN_IF_ERROR(f.Validate());
  return f;
}

Result<CacheWritePolicy> ParseCacheWritePolicy(std::string_view name) {
  if (name == "write-back") return CacheWritePolicy::kWriteBack;
  if (name == "write-through") return CacheWritePolicy::kWriteThrough;
  return Status::InvalidArgument("--cache-write-policy: expected write-back or write-through, got '" +
                                 std::string(name) + "'");
}

std::string_view CacheWritePolicyName(CacheWritePolicy p) {
  return p == CacheWritePolicy::kWriteThrough ? "write-through" : "write-back";
}

Result<uint64_t> PrefixCacheBudgetBytes(uint64_t memory_mb, double memory_percent) {
  if ((memory_mb > 0) == (memory_percent > 0)) {
    return Status::InvalidArgument("prefix cache memory: give exactly one of --cache-memory-mb "
                                   "and --cache-memory-percent (got " +
                                   std::to_string(memory_mb) + " MB and " +
                                   std::to_string(memory_percent) + "%)");
  }
  if (memory_mb > 0) {
    if (memory_mb > (uint64_t{1} << 40)) {
      return Status::InvalidArgument("--cache-memory-mb " + std::to_string(memory_mb) +
                                     " is larger than any machine");
    }
    return memory_mb << 20;
  }
  if (!(memory_percent <= 100.0) || std::isnan(memory_percent)) {
    return Status::InvalidArgument("--cache-memory-percent: expected (0, 100], got " +
                                   std::to_string(memory_percent));
  }
  KVTIER_ASSIGN_OR_RETURN(const uint64_t ram, TotalRamBytes());
  return static_cast<uint64_t>(static_cast<double>(ram) * memory_percent / 100.0);
}

namespace {

// Blocks read from the lower tier at once during a promotion.
constexpr size_t kPromoteThreads = 4;

Status CheckTokens(const char* op, std::span<const int32_t> tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0) {
      return Status::InvalidArgument(std::string(op) + ": token " + std::to_string(i) +
                                     " is " + std::to_string(tokens[i]) +
                                     " (ids are >= 0)");
    }
  }
  return Status::OK();
}

}  // namespace

Result<Namespace*> PrefixCache::Impl::GetNamespace(const ModelFingerprint& model,
                                                   const KvShape& shape, const Format& k,
                                                   const Format& v, uint32_t block_tokens,
                                                   std::shared_ptr<BlockPool> pool) {
  const BlockKey key = NamespaceKey(model, shape, k, v, block_tokens);
  if (Namespace* ns = tree.Find(key)) return ns;
  auto ns = std::make_unique<Namespace>();
  ns->key = key;
  ns->model = model;
  ns->shape = shape;
  ns->k_format = k;
  ns->v_format = v;
  ns->block_tokens = block_tokens;
  if (pool == nullptr) {
    // The store format's own pool: at most the budget in blocks (plus two for rounding), and
    // evicted blocks go straight back to the OS so its memory is what the tree holds.
    KVTIER_ASSIGN_OR_RETURN(const KvBlockLayout layout,
                            KvBlockLayout::Make(shape, k, v, block_tokens));
    BlockPoolOptions po;
    po.shape = shape;
    po.k_format = k;
    po.v_format = v;
    po.block_tokens = block_tokens;
    po.capacity_bytes = opt.memory_budget_bytes + 2 * layout.block_stride;
    po.retain_free_bytes = 0;
    KVTIER_ASSIGN_OR_RETURN(pool, BlockPool::Create(po));
    ns->owned_pool = true;
  }
  ns->pool = std::move(pool);
  ns->block_bytes = ns->pool->layout().block_stride;
  return tree.Add(std::move(ns));
}

uint64_t PrefixCache::Impl::EvictOne(uint64_t max_tick) {
  Node* leaf = tree.EvictionCandidate(max_tick);
  if (leaf == nullptr) return 0;
  const uint64_t b = tree.RemoveLeaf(leaf, evict_cb);
  ++stats.evicted_blocks;
  stats.evicted_bytes += b;
  return b;
}

bool PrefixCache::Impl::MakeRoom(uint64_t need, uint64_t max_tick, uint32_t* evicted) {
  while (tree.bytes() + states.bytes() + reserved + need > opt.memory_budget_bytes) {
    bool block = false;
    if (EvictAny(max_tick, &block) == 0) return false;
    *evicted += block;
  }
  return true;
}

std::vector<const std::vector<int32_t>*> PrefixCache::Impl::PinLists(
    const ModelFingerprint& model) const {
  std::vector<const std::vector<int32_t>*> out;
  for (const auto& [m, list] : pins) {
    if (m == model) out.push_back(&list);
  }
  return out;
}

uint32_t PrefixCache::Impl::SpillSequence(const ModelFingerprint& model,
                                          std::span<const int32_t> tokens,
                                          const SequenceCache& seq) {
  const BlockPool& sp = *seq.pool();
  const uint32_t B = sp.block_tokens();
  const BlockKey ns_key = NamespaceKey(model, sp.shape(), sp.k_format(), sp.v_format(), B);
  BlockKey parent = ns_key;
  uint32_t n = 0;
  for (size_t pos = 0, i = 0; pos < tokens.size(); pos += B, ++i) {
    const std::span<const int32_t> t = tokens.subspan(pos, std::min<size_t>(B, tokens.size() - pos));
    const uint32_t end = static_cast<uint32_t>(t.size());
    EvictedBlock e;
    e.key = ChainBlockKey(parent, t);
    e.parent_key = parent;
    e.namespace_key = ns_key;
    e.model = model;
    e.first_position = static_cast<uint32_t>(pos);
    e.tokens = t;
    if (pos + t.size() == tokens.size()) e.entry_ends = std::span<const uint32_t>(&end, 1);
    e.pool = seq.pool();
    e.block = seq.block_ids()[i];
    opt.lower_tier->Spill(e);
    parent = e.key;
    ++n;
  }
  stats.written_through_blocks += n;
  return n;
}

uint32_t PrefixCache::Impl::SpillPlan(const Plan& plan, const std::vector<Node*>& path) {
  uint32_t n = 0;
  for (size_t i = 0; i < plan.steps.size() && i < path.size(); ++i) {
    const PlanStep::Kind k = plan.steps[i].kind;
    if (k != PlanStep::kNew && k != PlanStep::kUpgrade && k != PlanStep::kExtend) continue;
    const Node* node = path[i];
    EvictedBlock e;
    e.key = node->key;
    e.parent_key = node->parent->key;
    e.namespace_key = node->ns->key;
    e.model = node->ns->model;
    e.first_position = node->start;
    e.tokens = node->tokens;
    e.entry_ends = node->ends;
    e.pool = node->ns->pool;
    e.block = node->block;
    opt.lower_tier->Spill(e);
    ++n;
  }
  stats.written_through_blocks += n;
  return n;
}

uint32_t PrefixCache::Impl::RamMatch(const ModelFingerprint& model,
                                     std::span<const int32_t> tokens, const BlockPool& pool) {
  uint32_t best = 0;
  for (const auto& ns : tree.namespaces()) {
    if (ns->model == model && ns->shape == pool.shape()) {
      best = std::max(best, tree.Walk(*ns, tokens).matched);
    }
  }
  return best;
}

void PrefixCache::Impl::Promote(const ModelFingerprint& model, std::span<const int32_t> tokens,
                                const std::shared_ptr<BlockPool>& pool, uint32_t ram,
                                SequenceCache* direct, uint32_t* direct_matched,
                                bool* direct_end) {
  LowerTier& lower = *opt.lower_tier;
  // The tier's longest chain over its namespaces of this model and shape.
  TierNamespace best_ns;
  std::vector<TierBlock> chain;
  uint32_t best = ram;
  for (const TierNamespace& ns : lower.Namespaces(model)) {
    if (!(ns.shape == pool->shape())) continue;
    std::vector<TierBlock> c = lower.FindChain(ns, tokens);
    uint32_t m = 0;
    for (const TierBlock& b : c) {
      m += prefix::CommonPrefix(b.tokens, tokens.subspan(std::min<size_t>(m, tokens.size())));
    }
    if (m > best) {
      best = m;
      best_ns = ns;
      chain = std::move(c);
    }
  }
  if (chain.empty()) return;
  // The chain's own tokens (its last block may run past the request: a supersequence).
  std::vector<int32_t> chain_tokens;
  for (const TierBlock& b : chain) chain_tokens.insert(chain_tokens.end(), b.tokens.begin(), b.tokens.end());

  std::unique_lock<std::mutex> lock(mu);
  const bool native = pool->k_format() == best_ns.k_format && pool->v_format() == best_ns.v_format &&
                      pool->block_tokens() == best_ns.block_tokens;
  Result<Namespace*> got = GetNamespace(model, best_ns.shape, best_ns.k_format, best_ns.v_format,
                                        best_ns.block_tokens, native ? pool : nullptr);
  if (!got.ok() || !((*got)->key == best_ns.key)) {
    ++stats.promote_failures;
    return;
  }
  Namespace* ns = *got;
  Plan plan = tree.MakePlan(*ns, chain_tokens);
  // Blocks to read: the steps that take a block. Allocated now, filled outside the lock.
  std::vector<BlockId> ids(plan.steps.size(), -1);  // [chain blocks]
  std::vector<BlockId> loaded;
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const PlanStep::Kind k = plan.steps[i].kind;
    if (k == PlanStep::kNew || k == PlanStep::kUpgrade || k == PlanStep::kExtend) {
      std::vector<BlockId> one;
      // Uncleared: Load writes every byte of a block it returns OK for; a failed one goes
      // back to the pool unseen (and is cleared when Allocate hands it out again).
      if (!ns->pool->AllocateUncleared(1, KvOwner::kTier, &one, "prefix cache promote").ok()) break;
      ids[i] = one[0];
      loaded.push_back(one[0]);
    }
  }
  lock.unlock();
  // Read the blocks, a few at a time: reading from disk waits, verifying is CPU work.
  std::vector<uint8_t> read_ok(plan.steps.size(), 0);  // [chain blocks]
  {
    std::vector<size_t> todo;
    for (size_t i = 0; i < plan.steps.size(); ++i) {
      if (ids[i] >= 0) todo.push_back(i);
    }
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t t; (t = next.fetch_add(1)) < todo.size();) {
        const size_t i = todo[t];
        read_ok[i] = lower.Load(best_ns, chain[i].key, *ns->pool, ids[i]).ok() ? 1 : 0;
      }
    };
    const size_t n_threads = std::min<size_t>(kPromoteThreads, todo.size());
    std::vector<std::thread> helpers;
    for (size_t t = 1; t < n_threads; ++t) helpers.emplace_back(work);
    work();
    for (std::thread& h : helpers) h.join();
  }
  size_t usable = 0;  // leading chain blocks that are in RAM or were read
  for (; usable < plan.steps.size(); ++usable) {
    if (ids[usable] < 0) {
      const PlanStep::Kind k = plan.steps[usable].kind;
      if (k == PlanStep::kExisting || k == PlanStep::kMarker) continue;
      break;  // no block could be allocated
    }
    if (read_ok[usable] == 0) break;
  }
  lock.lock();
  auto release = [&] {
    ns->pool->Unref(loaded, KvOwner::kTier);
  };
  if (usable < plan.steps.size()) ++stats.promote_failures;
  // Plan again over what could be read (the tree may have changed); every step that takes a
  // block must have one we read.
  size_t n_tokens = 0;
  for (size_t i = 0; i < usable; ++i) n_tokens += chain[i].tokens.size();
  while (n_tokens > 0) {
    const std::span<const int32_t> part(chain_tokens.data(), n_tokens);
    plan = tree.MakePlan(*ns, part);
    size_t bad = plan.steps.size();
    for (size_t i = 0; i < plan.steps.size() && bad == plan.steps.size(); ++i) {
      const PlanStep::Kind k = plan.steps[i].kind;
      if ((k == PlanStep::kNew || k == PlanStep::kUpgrade || k == PlanStep::kExtend) && ids[i] < 0) {
        bad = i;
      }
    }
    if (bad == plan.steps.size()) break;
    n_tokens = bad * ns->block_tokens;
  }
  if (n_tokens == 0) {
    release();
    return;
  }
  const uint64_t stamp = ++tick;
  ProtectPlan(plan, stamp);
  uint32_t evicted = 0;
  if (MakeRoom(plan.new_blocks * ns->block_bytes, stamp, &evicted)) {
    const std::span<const int32_t> part(chain_tokens.data(), n_tokens);
    if (tree.Apply(*ns, plan, part, ids, stamp, PinLists(model)).ok()) {
      stats.promoted_blocks += plan.new_blocks;
    }
  } else {
    // RAM cannot hold the chain (larger than the budget, or the rest pinned or in use): serve
    // this request from the blocks just read, and leave RAM as it is.
    const std::span<const int32_t> part(chain_tokens.data(), n_tokens);
    const uint32_t matched = prefix::CommonPrefix(part, tokens);
    const uint32_t use = std::min<uint32_t>(matched, static_cast<uint32_t>(tokens.size()) - 1);
    std::vector<BlockId> use_ids;  // [ceil(use / B)] the chain's blocks, read or in RAM
    for (size_t i = 0; use > 0 && i < (use + ns->block_tokens - 1) / ns->block_tokens; ++i) {
      use_ids.push_back(ids[i] >= 0 ? ids[i] : plan.steps[i].node->block);
    }
    if (use > 0) {
      Result<SequenceCache> s =
          SequenceCache::FromBlocks(ns->pool, use_ids, use, KvOwner::kPrefixCache);
      if (s.ok()) {
        *direct = std::move(*s);
        *direct_matched = matched;
        const uint32_t last = (matched - 1) / ns->block_tokens;  // the block matched ends in
        const uint32_t in_last = matched - last * ns->block_tokens;
        const std::vector<uint32_t>& ends = chain[last].ends;
        *direct_end = std::find(ends.begin(), ends.end(), in_last) != ends.end();
      }
    }
  }
  release();
}

Result<std::unique_ptr<PrefixCache>> PrefixCache::Create(PrefixCacheOptions options) {
  if (options.memory_budget_bytes == 0) {
    return Status::InvalidArgument("prefix cache: memory_budget_bytes must be > 0");
  }
  if (options.store_format) KVTIER_RETURN_IF_ERROR(options.store_format->Validate());
  if (options.store_v_format) {
    KVTIER_RETURN_IF_ERROR(options.store_v_format->Validate());
    if (!options.store_format) {
      return Status::InvalidArgument("prefix cache: store_v_format " + options.store_v_format->name() +
                                     " given without store_format (K)");
    }
  }
  const Format store_v = options.store_v_format.value_or(options.store_format.value_or(Format::F16()));
  if (options.store_format && store_v.is_token_grouped()) {
    return Status::InvalidArgument("prefix cache: V store format " + store_v.name() +
                                   " is token-grouped (K only): give a K/V pair, e.g. " +
                                   store_v.name() + "/rot4s0");
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  impl->stats.budget_bytes = impl->opt.memory_budget_bytes;
  return std::unique_ptr<PrefixCache>(new PrefixCache(std::move(impl)));
}

PrefixCache::PrefixCache(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PrefixCache::~PrefixCache() = default;
const PrefixCacheOptions& PrefixCache::options() const { return impl_->opt; }

Result<PrefixFetchResult> PrefixCache::Impl::FetchBlocks(const ModelFingerprint& model,
                                                        std::span<const int32_t> tokens,
                                                        const std::shared_ptr<BlockPool>& pool) {
  if (pool == nullptr) return Status::InvalidArgument("prefix cache fetch: no pool");
  if (tokens.empty()) return Status::InvalidArgument("prefix cache fetch: no tokens");
  KVTIER_RETURN_IF_ERROR(CheckTokens("prefix cache fetch", tokens));
  Impl& m = *this;
  using Clock = std::chrono::steady_clock;
  PrefixFetchResult::Times times;
  if (m.opt.lower_tier) {
    const Clock::time_point t0 = Clock::now();
    uint32_t ram;
    {
      std::lock_guard<std::mutex> lock(m.mu);
      ram = m.RamMatch(model, tokens, *pool);
    }
    if (ram + 1 < tokens.size()) {
      SequenceCache direct;
      uint32_t matched = 0;
      bool end = false;
      m.Promote(model, tokens, pool, ram, &direct, &matched, &end);
      times.tier_chain_us = prefix::MicrosSince(t0);
      if (direct.valid() && direct.size() > 0) {
        Result<PrefixFetchResult> d = m.FetchDirect(tokens, pool, std::move(direct), matched, end);
        if (d.ok()) {
          d->times.tier_chain_us = times.tier_chain_us;
          d->times.convert_us = prefix::MicrosSince(t0) - times.tier_chain_us;
        }
        return d;
      }
    }
    times.tier_chain_us = prefix::MicrosSince(t0);
  }
  PrefixFetchResult r;
  r.times = times;
  SequenceCache source;  // the cached blocks when they need converting
  const Clock::time_point t_match = Clock::now();
  {
    std::lock_guard<std::mutex> lock(m.mu);
    ++m.stats.lookups;
    m.stats.tokens_requested += tokens.size();
    // The longest match over every namespace of the model; on a tie, the requested pool.
    Namespace* best = nullptr;
    Match best_match;
    for (const auto& ns : m.tree.namespaces()) {
      if (!(ns->model == model) || !(ns->shape == pool->shape())) continue;
      Match mt = m.tree.Walk(*ns, tokens);
      const bool better = best == nullptr || mt.matched > best_match.matched ||
                          (mt.matched == best_match.matched && ns->pool == pool);
      if (mt.matched > 0 && better) {
        best = ns.get();
        best_match = std::move(mt);
      }
    }
    const uint32_t n = static_cast<uint32_t>(tokens.size());
    const uint32_t reuse = best == nullptr ? 0 : std::min(best_match.matched, n - 1);
    if (reuse == 0) {
      ++m.stats.hits[static_cast<int>(PrefixMatchKind::kMiss)];
      r.sequence = SequenceCache(pool, KvOwner::kActive);
      return r;
    }
    r.matched_tokens = best_match.matched;
    r.reused_tokens = reuse;
    if (best_match.matched == n) {
      r.kind = best_match.entry_end ? PrefixMatchKind::kExact : PrefixMatchKind::kSupersequence;
    } else {
      r.kind = best_match.entry_end ? PrefixMatchKind::kPrefix : PrefixMatchKind::kLcp;
    }
    r.k_format = best->k_format;
    r.v_format = best->v_format;
    ++m.stats.hits[static_cast<int>(r.kind)];
    m.stats.tokens_reused += reuse;
    m.tree.Touch(best_match.path, ++m.tick);
    for (Node* node : best_match.path) ++node->hits;
    const size_t n_blocks = (reuse + best->block_tokens - 1) / best->block_tokens;
    std::vector<BlockId> ids;  // [n_blocks] the path's blocks holding tokens [0, reuse)
    for (size_t i = 0; i < n_blocks; ++i) ids.push_back(best_match.path[i]->block);
    const bool in_place = best->pool == pool;
    KVTIER_ASSIGN_OR_RETURN(
        SequenceCache s,
        SequenceCache::FromBlocks(best->pool, ids, reuse,
                                  in_place ? KvOwner::kActive : KvOwner::kPrefixCache));
    r.times.match_us = prefix::MicrosSince(t_match);
    if (in_place) {
      r.sequence = std::move(s);
      return r;
    }
    source = std::move(s);
    ++m.stats.converted_fetches;
  }
  // Dequantize (or copy) outside the lock; `source` keeps the blocks alive meanwhile.
  const Clock::time_point t_convert = Clock::now();
  KVTIER_ASSIGN_OR_RETURN(r.sequence, ConvertSequence(source, pool, KvOwner::kActive));
  r.times.convert_us = prefix::MicrosSince(t_convert);
  r.converted = true;
  return r;
}

Result<PrefixFetchResult> PrefixCache::Impl::FetchDirect(std::span<const int32_t> tokens,
                                                        const std::shared_ptr<BlockPool>& pool,
                                                        SequenceCache direct, uint32_t matched,
                                                        bool entry_end) {
  PrefixFetchResult r;
  const uint32_t n = static_cast<uint32_t>(tokens.size());
  r.matched_tokens = matched;
  r.reused_tokens = direct.size();
  if (matched == n) {
    r.kind = entry_end ? PrefixMatchKind::kExact : PrefixMatchKind::kSupersequence;
  } else {
    r.kind = entry_end ? PrefixMatchKind::kPrefix : PrefixMatchKind::kLcp;
  }
  r.k_format = direct.pool()->k_format();
  r.v_format = direct.pool()->v_format();
  {
    std::lock_guard<std::mutex> lock(mu);
    ++stats.lookups;
    stats.tokens_requested += n;
    ++stats.hits[static_cast<int>(r.kind)];
    stats.tokens_reused += r.reused_tokens;
    ++stats.direct_tier_fetches;
  }
  if (direct.pool() == pool) {
    KVTIER_RETURN_IF_ERROR(direct.SetOwner(KvOwner::kActive));
    r.sequence = std::move(direct);
    return r;
  }
  {
    std::lock_guard<std::mutex> lock(mu);
    ++stats.converted_fetches;
  }
  KVTIER_ASSIGN_OR_RETURN(r.sequence, ConvertSequence(direct, pool, KvOwner::kActive));
  r.converted = true;
  return r;
}

Result<PrefixStoreResult> PrefixCache::Impl::Store(const ModelFingerprint& model,
                                                   std::span<const int32_t> all_tokens,
                                                   const SequenceCache& seq) {
  if (!seq.valid()) return Status::InvalidArgument("prefix cache store: the sequence has no pool");
  if (!seq.complete()) {
    return Status::InvalidArgument("prefix cache store: the sequence is half way through a "
                                   "forward pass");
  }
  KVTIER_RETURN_IF_ERROR(CheckTokens("prefix cache store", all_tokens));
  PrefixStoreResult r;
  const uint32_t n = static_cast<uint32_t>(std::min<size_t>(all_tokens.size(), seq.size()));
  if (n == 0) return r;
  const std::span<const int32_t> tokens = all_tokens.first(n);
  const BlockPool& sp = *seq.pool();
  const std::optional<Format>& store_v = opt.store_v_format ? opt.store_v_format : opt.store_format;
  const bool quantize = opt.store_format && n >= opt.min_quantize_tokens &&
                        !(sp.k_format() == *opt.store_format && sp.v_format() == *store_v);
  const Format k = quantize ? *opt.store_format : sp.k_format();
  const Format v = quantize ? *store_v : sp.v_format();
  r.stored_tokens = n;
  r.quantized = quantize;

  std::unique_lock<std::mutex> lock(mu);
  ++stats.stores;
  KVTIER_ASSIGN_OR_RETURN(Namespace* const ns,
                          GetNamespace(model, sp.shape(), k, v, sp.block_tokens(),
                                       quantize ? nullptr : seq.pool()));
  const uint32_t B = ns->block_tokens;
  uint64_t stamp = ++tick;
  Plan plan = tree.MakePlan(*ns, tokens);
  uint64_t need = plan.new_blocks * ns->block_bytes;
  // An entry RAM can never hold (or cannot now: no_room below) goes to the lower tier alone,
  // in the sequence's own formats, so the big tier still serves it.
  auto lower_only = [&]() -> Result<PrefixStoreResult> {
    r.written_through_blocks = SpillSequence(model, tokens, seq);
    r.lower_tier_only = true;
    r.quantized = false;
    ++stats.lower_only_stores;
    stats.stored_tokens += n;
    return r;
  };
  if (need > opt.memory_budget_bytes - std::min(opt.memory_budget_bytes, tree.pinned_bytes())) {
    if (opt.lower_tier) return lower_only();
    return Fail(Status::ResourceExhausted(
        "prefix cache store: " + std::to_string(n) + " tokens need " + std::to_string(need) +
        " bytes of new blocks; the budget is " + std::to_string(opt.memory_budget_bytes) +
        " bytes, " + std::to_string(tree.pinned_bytes()) + " of them pinned"));
  }
  auto no_room = [&]() -> Result<PrefixStoreResult> {
    if (opt.lower_tier) return lower_only();
    return Fail(Status::ResourceExhausted(
        "prefix cache store: no room for " + std::to_string(need) + " bytes (" +
        std::to_string(tree.bytes()) + " of " + std::to_string(opt.memory_budget_bytes) +
        " held, the rest pinned or in use)"));
  };
  // The nodes the plan uses become the most recent, out of eviction's reach.
  ProtectPlan(plan, stamp);

  std::vector<BlockId> blocks;  // [blocks of the entry] what the tree will reference
  SequenceCache converted;      // owns the blocks of a conversion until the tree takes them
  if (ns->pool == seq.pool()) {
    blocks.assign(seq.block_ids().begin(), seq.block_ids().begin() + plan.steps.size());
  } else {
    // Convert the blocks the tree lacks, outside the lock, on top of the blocks it has
    // (`converted` holds references to those, so they stay).
    if (!MakeRoom(need, stamp, &r.evicted_blocks)) return no_room();
    reserved += need;
    const uint32_t have = plan.existing_full * B;
    std::vector<BlockId> have_ids;
    for (uint32_t i = 0; i < plan.existing_full; ++i) have_ids.push_back(plan.steps[i].node->block);
    Result<SequenceCache> base =
        SequenceCache::FromBlocks(ns->pool, have_ids, have, KvOwner::kPrefixCache);
    if (!base.ok()) {
      reserved -= need;
      return base.status();
    }
    converted = std::move(*base);
    lock.unlock();
    Status s = AppendConverted(converted, seq, have, n - have);
    lock.lock();
    reserved -= need;
    if (!s.ok()) return s.code() == StatusCode::kResourceExhausted ? Fail(s) : s;
    blocks.assign(converted.block_ids().begin(), converted.block_ids().end());
    // The tree may have changed meanwhile: plan again.
    stamp = ++tick;
    plan = tree.MakePlan(*ns, tokens);
    need = plan.new_blocks * ns->block_bytes;
    ProtectPlan(plan, stamp);
  }
  if (!MakeRoom(need, stamp, &r.evicted_blocks)) return no_room();
  const std::vector<const std::vector<int32_t>*> pin_lists = PinLists(model);
  KVTIER_RETURN_IF_ERROR(tree.Apply(*ns, plan, tokens, blocks, stamp, pin_lists));
  if (opt.lower_tier && opt.write_policy == CacheWritePolicy::kWriteThrough && plan.new_blocks > 0) {
    r.written_through_blocks = SpillPlan(plan, tree.Walk(*ns, tokens).path);
  }
  r.new_blocks = plan.new_blocks;
  r.shared_blocks = static_cast<uint32_t>(plan.steps.size()) - plan.new_blocks;
  stats.stored_tokens += n;
  stats.quantized_stores += quantize;
  return r;
}

Result<PrefixStoreResult> PrefixCache::Store(const ModelFingerprint& model,
                                             std::span<const int32_t> tokens,
                                             const SequenceCache& sequence) {
  Result<PrefixStoreResult> r = impl_->Store(model, tokens, sequence);
  impl_->DrainStateSpills();
  return r;
}

Result<PrefixStoreResult> PrefixCache::Store(const ModelFingerprint& model,
                                             std::span<const int32_t> tokens,
                                             SequenceCache&& sequence) {
  SequenceCache seq = std::move(sequence);  // released when this returns, stored or not
  Result<PrefixStoreResult> r = impl_->Store(model, tokens, seq);
  impl_->DrainStateSpills();
  return r;
}

Status PrefixCache::Pin(const ModelFingerprint& model, std::span<const int32_t> tokens) {
  if (tokens.empty()) return Status::InvalidArgument("prefix cache pin: no tokens");
  KVTIER_RETURN_IF_ERROR(CheckTokens("prefix cache pin", tokens));
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->pins.emplace_back(model, std::vector<int32_t>(tokens.begin(), tokens.end()));
  impl_->tree.AddPins(model, tokens, +1);
  return Status::OK();
}

Status PrefixCache::Unpin(const ModelFingerprint& model, std::span<const int32_t> tokens) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto& pins = impl_->pins;
  auto it = std::find_if(pins.begin(), pins.end(), [&](const auto& p) {
    return p.first == model && std::equal(p.second.begin(), p.second.end(), tokens.begin(),
                                          tokens.end());
  });
  if (it == pins.end()) {
    return Status::NotFound("prefix cache unpin: these " + std::to_string(tokens.size()) +
                            " tokens are not pinned");
  }
  pins.erase(it);
  impl_->tree.AddPins(model, tokens, -1);
  return Status::OK();
}

uint64_t PrefixCache::Evict(uint64_t bytes) {
  uint64_t freed = 0;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    while (freed < bytes) {
      bool block = false;
      const uint64_t b = impl_->EvictAny(UINT64_MAX, &block);
      if (b == 0) break;
      freed += b;
    }
  }
  impl_->DrainStateSpills();
  return freed;
}

void PrefixCache::Clear() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->tree.Clear();
  impl_->states.Clear();
}

PrefixCacheStats PrefixCache::Stats(bool exclusive_bytes) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  PrefixCacheStats s = impl_->stats;
  s.bytes = impl_->tree.bytes() + impl_->states.bytes();
  s.states = impl_->states.size();
  s.state_bytes = impl_->states.bytes();
  s.pinned_bytes = impl_->tree.pinned_bytes();
  s.entries = s.nodes = 0;
  for (const auto& ns : impl_->tree.namespaces()) {
    s.entries += ns->entries;
    s.nodes += ns->blocks;
    PrefixFormatStats f;
    f.k_format = ns->k_format;
    f.v_format = ns->v_format;
    f.blocks = ns->blocks;
    f.bytes = ns->blocks * ns->block_bytes;
    f.tokens = ns->tokens;
    std::vector<const Node*> stack;
    if (exclusive_bytes) stack.push_back(&ns->root);
    while (!stack.empty()) {
      const Node* n = stack.back();
      stack.pop_back();
      if (!n->is_root() && ns->pool->RefCount(n->block) == 1) f.exclusive_bytes += ns->block_bytes;
      for (const auto& [key, c] : n->full) stack.push_back(c.get());
      for (const auto& c : n->tails) stack.push_back(c.get());
    }
    s.by_format.push_back(std::move(f));
  }
  return s;
}

std::vector<PrefixEntryInfo> PrefixCache::Hottest(size_t n, size_t head_tokens) const {
  if (n == 0) return {};
  // An entry: a node and an end inside it. Ranked by (hits, last use, length).
  struct Candidate {
    const Node* node;
    uint32_t end;
    const Namespace* ns;
  };
  auto hotter = [](const Candidate& a, const Candidate& b) {
    if (a.node->hits != b.node->hits) return a.node->hits > b.node->hits;
    if (a.node->used_ms != b.node->used_ms) return a.node->used_ms > b.node->used_ms;
    return a.node->start + a.end > b.node->start + b.end;
  };
  std::vector<Candidate> heap;  // [<= n] a heap whose top is the coldest kept
  heap.reserve(std::min<size_t>(n, 4096) + 1);
  std::vector<PrefixEntryInfo> out;
  std::lock_guard<std::mutex> lock(impl_->mu);
  const int64_t now_ms = prefix::SteadyNowMs();
  std::vector<const Node*> stack;
  for (const auto& ns : impl_->tree.namespaces()) {
    stack.assign(1, &ns->root);
    while (!stack.empty()) {
      const Node* node = stack.back();
      stack.pop_back();
      for (uint32_t end : node->ends) {
        const Candidate c{node, end, ns.get()};
        if (heap.size() < n) {
          heap.push_back(c);
          std::push_heap(heap.begin(), heap.end(), hotter);
        } else if (hotter(c, heap.front())) {
          std::pop_heap(heap.begin(), heap.end(), hotter);
          heap.back() = c;
          std::push_heap(heap.begin(), heap.end(), hotter);
        }
      }
      for (const auto& [key, c] : node->full) stack.push_back(c.get());
      for (const auto& c : node->tails) stack.push_back(c.get());
    }
  }
  std::sort(heap.begin(), heap.end(), hotter);
  for (const Candidate& c : heap) {
    PrefixEntryInfo e;
    e.tokens = c.node->start + c.end;
    e.blocks = c.node->start / c.ns->block_tokens + 1;
    e.k_format = c.ns->k_format;
    e.v_format = c.ns->v_format;
    e.hits = c.node->hits;
    e.idle_ms = static_cast<uint64_t>(std::max<int64_t>(0, now_ms - c.node->used_ms));
    e.in_use = c.ns->pool->RefCount(c.node->block) > 1;
    e.pinned = c.node->pins > 0;
    const uint32_t want = static_cast<uint32_t>(std::min<size_t>(head_tokens, e.tokens));
    if (want > 0) {
      std::vector<const Node*> path;  // root-first nodes holding tokens [0, want)
      for (const Node* p = c.node; !p->is_root(); p = p->parent) {
        if (p->start < want) path.push_back(p);
      }
      e.head.reserve(want);
      for (auto it = path.rbegin(); it != path.rend(); ++it) {
        const Node* p = *it;
        const size_t take = std::min<size_t>(p->tokens.size(), want - p->start);
        e.head.insert(e.head.end(), p->tokens.begin(), p->tokens.begin() + take);
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

Status PrefixCache::CheckInvariants() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  KVTIER_RETURN_IF_ERROR(impl_->tree.CheckInvariants(impl_->pins));
  if (impl_->tree.bytes() + impl_->states.bytes() > impl_->opt.memory_budget_bytes) {
    return Status::Internal("prefix cache: " +
                            std::to_string(impl_->tree.bytes() + impl_->states.bytes()) +
                            " bytes held, over the budget of " +
                            std::to_string(impl_->opt.memory_budget_bytes));
  }
  return Status::OK();
}

}  // namespace kvtier
