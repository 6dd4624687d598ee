// Module prefix (src/prefix, kvtier_prefix; order and include rule: docs/architecture.md) owns the
// RAM prefix cache.
//
// PrefixCache: the RAM tier. A token radix tree whose nodes hold references to KV blocks, so a
// request whose prompt starts like an earlier one reuses that K/V instead of recomputing it.
//
// Semantics are vllm-mlx's prefix cache (seed 003) on shared blocks:
//   - Fetch(tokens) finds the longest cached prefix of `tokens` and returns it as a
//     SequenceCache that shares the cached blocks (no copy when the formats match the
//     requested pool's). The match kind is vllm-mlx's: exact, prefix (a cached entry is a
//     prefix of the request), supersequence (the request is a prefix of a cached entry;
//     trimmed to the request) or longest common prefix. At least one request token is always
//     left to compute, so an exact hit still yields logits.
//   - Store(tokens, sequence) stores the sequence's first min(tokens, sequence) tokens (never
//     the blocks reserved past its end), shares blocks already in the tree, and quantizes on
//     store: entries of at least min_quantize_tokens tokens go to store_format when it differs
//     from the sequence's formats. Entries in another format than the fetching pool's are
//     converted on fetch; in the same pool they are used in place.
//
// Layout: one tree per namespace (model fingerprint, KV shape, K/V formats, block size; see
// block_key.h). A node is one block: block_tokens tokens (a full block, which may have
// children) or fewer (a sequence's tail; always a leaf). Its key is ChainBlockKey(parent key,
// its tokens). Siblings are prefix-free: no child's tokens start another's, so a shorter
// entry is a marker inside a longer entry's block, and both share it.
//
// Memory: every block the tree references counts against memory_budget_bytes (whole blocks,
// block_stride each), shared with running requests or not; a store that cannot fit after
// evicting goes to the lower tier alone when there is one (PrefixStoreResult::lower_tier_only;
// a fetch RAM cannot then hold is served from the tier's blocks directly), else fails with
// ResourceExhausted and changes nothing. Eviction takes least recently
// used leaves that are not pinned and that nobody else references (no running request, no
// tier write in flight), so every eviction frees memory. on_evict sees each block just before
// the tree drops it (the SSD tier's hook).
//
// Thread-safe: every method may be called from any thread. Format conversions (quantize on
// store, dequantize on fetch) run outside the cache's lock.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/block_pool.h"
#include "kvtier/format.h"
#include "kvtier/sequence_cache.h"
#include "kvtier/state_snapshot.h"
#include "kvtier/status.h"

namespace kvtier {

// Values appear in metrics and logs; never renumber.
enum class PrefixMatchKind : uint8_t {
  kMiss = 0,
  kExact = 1,          // a cached entry equals the request
  kPrefix = 2,         // a cached entry is a prefix of the request
  kSupersequence = 3,  // the request is a prefix of a cached entry
  kLcp = 4,            // request and a cached entry share a prefix, then differ
};
inline constexpr int kNumPrefixMatchKinds = 5;
std::string_view PrefixMatchKindName(PrefixMatchKind k);  // "miss", "exact", "prefix", ...

// A block leaving the tree (PrefixCacheOptions::on_evict). The callback runs under the cache's
// lock: it must be quick and must not call the PrefixCache. To write the block later it takes
// its own reference first (pool->Ref({block}, KvOwner::kTier)) and drops it when done.
struct EvictedBlock {
  BlockKey key;                       // ChainBlockKey(parent_key, tokens)
  BlockKey parent_key;                // the namespace key for a first block
  BlockKey namespace_key;
  ModelFingerprint model;
  uint32_t first_position = 0;        // position of tokens[0] in its sequence
  std::span<const int32_t> tokens;    // the block's tokens (valid during the call)
  std::span<const uint32_t> entry_ends;  // stored entries that end in this block (1..size)
  std::shared_ptr<BlockPool> pool;    // K/V in pool->k_format() / v_format()
  BlockId block = -1;
};
using EvictionCallback = std::function<void(const EvictedBlock&)>;

// A namespace (block_key.h) as a lower tier knows it from what it stores.
struct TierNamespace {
  BlockKey key;
  ModelFingerprint model;
  KvShape shape;
  Format k_format, v_format;
  uint32_t block_tokens = 0;
};

// A block of a lower tier on a request's path.
struct TierBlock {
  BlockKey key;
  std::vector<int32_t> tokens;  // [1, block_tokens]
  std::vector<uint32_t> ends;   // entry ends inside the block
};

// A tier below RAM (the SSD tier; later a shared remote one). The cache spills every evicted
// block to it and, when RAM holds less of a request than the tier does, promotes the tier's
// blocks into RAM before answering. Implementations are thread-safe.
class LowerTier {
 public:
  virtual ~LowerTier() = default;
  // A block leaving RAM. Called under the cache's lock: take a kTier reference on the block
  // and queue the write; never call the cache.
  virtual void Spill(const EvictedBlock& block) = 0;
  // Namespaces with blocks of `model`.
  virtual std::vector<TierNamespace> Namespaces(const ModelFingerprint& model) = 0;
  // The longest chain along `tokens` from their start: full blocks found by key, then at most
  // one block (full or tail) sharing the most leading tokens with the rest.
  virtual std::vector<TierBlock> FindChain(const TierNamespace& ns,
                                           std::span<const int32_t> tokens) = 0;
  // Reads block `key` of `ns` into block `id` of `pool` (the namespace's shape and formats),
  // verified; a block that fails verification is put aside and reported as Corruption. On OK
  // every byte of block `id` is written (the rows, zeros elsewhere: it may come from
  // BlockPool::AllocateUncleared); on error its contents are unspecified and the caller must
  // give it back without using it.
  virtual Status Load(const TierNamespace& ns, const BlockKey& key, BlockPool& pool,
                      BlockId id) = 0;

  // Recurrent-state snapshots (kvtier/state_snapshot.h). A tier that does not keep them
  // leaves these as they are (nothing kept, nothing found).
  // A snapshot leaving RAM (or written through), keyed StateSnapshotKey(model, its tokens).
  // Called outside the cache's lock; the tier may keep the pointer.
  virtual void SpillState(const ModelFingerprint& model, const BlockKey& key,
                          std::shared_ptr<const StateSnapshot> snapshot) {
    (void)model, (void)key, (void)snapshot;
  }
  // The tier's longest snapshot of `model` after tokens[0, p), min_position < p <=
  // max_position, verified; null when none (a snapshot that fails verification is put aside
  // and counted, never returned). min_position is what the caller already has (RAM's
  // snapshot): positions at or below it are not read.
  virtual std::shared_ptr<const StateSnapshot> FindState(const ModelFingerprint& model,
                                                         std::span<const int32_t> tokens,
                                                         uint32_t min_position,
                                                         uint32_t max_position) {
    (void)model, (void)tokens, (void)min_position, (void)max_position;
    return nullptr;
  }
};

// When stored entries reach the lower tier (PrefixCacheOptions::write_policy).
enum class CacheWritePolicy : uint8_t {
  // Blocks go down when RAM evicts them. An entry that cannot fit in RAM at all (larger than
  // the budget, or RAM full of pinned or in-use blocks) is written through anyway.
  kWriteBack = 0,
  // Every stored entry's new blocks also go to the lower tier at once (HiCache's
  // write-through): a shared remote tier sees every entry without waiting for eviction.
  kWriteThrough = 1,
};
// "write-back" / "write-through".
Result<CacheWritePolicy> ParseCacheWritePolicy(std::string_view name);
std::string_view CacheWritePolicyName(CacheWritePolicy p);

struct PrefixCacheOptions {
  // Bytes of blocks the tree may reference (> 0). See PrefixCacheBudgetBytes.
  uint64_t memory_budget_bytes = 0;
  // Quantize on store (vllm-mlx's --kv-cache-quantization): entries of at least
  // min_quantize_tokens tokens are stored in this format (K and V) when it differs from the
  // sequence's. nullopt: entries stay in the format they were computed in.
  std::optional<Format> store_format;
  // V's store format where it differs from K's (a K/V pair such as chan4g64/rot4s0: chan is
  // K only); nullopt: store_format for V too. Needs store_format.
  std::optional<Format> store_v_format;
  uint32_t min_quantize_tokens = 256;
  EvictionCallback on_evict;
  // Spill target and second source of hits (optional).
  std::shared_ptr<LowerTier> lower_tier;
  CacheWritePolicy write_policy = CacheWritePolicy::kWriteBack;
  // How StoreState keeps snapshots (`--state-type`): kBF16 rounds an f32 snapshot to bf16
  // (half the bytes, here and in the lower tiers); a fetch always returns f32 values.
  StateType state_type = StateType::kF32;
};

// vllm-mlx's --kv-cache-quantization-bits / -group-size: MLX affine, f16 scales. bits 8 or 4.
Result<Format> PrefixStoreFormat(int bits, int group_size);
// --cache-memory-mb or --cache-memory-percent: exactly one > 0. percent of physical RAM.
Result<uint64_t> PrefixCacheBudgetBytes(uint64_t memory_mb, double memory_percent);

// Fetch options. recurrent_state: the model keeps a recurrent state (qwen35), so K/V alone
// cannot resume a sequence: the fetch also looks for the longest state snapshot at a position
// p <= the reused K/V (RAM first, then the lower tier), keeps only the K/V of tokens [0, p)
// and returns the snapshot (PrefixFetchResult::state); without one, nothing is reused. The
// match kind and matched_tokens still describe the K/V match (docs/prefix-cache.md).
struct PrefixFetchOptions {
  bool recurrent_state = false;
};

struct PrefixFetchResult {
  PrefixMatchKind kind = PrefixMatchKind::kMiss;
  uint32_t matched_tokens = 0;  // request tokens found in the cache
  uint32_t reused_tokens = 0;   // == sequence.size(): matched, at most request size - 1
  bool converted = false;       // the entry was in another format or pool and was converted
  Format k_format, v_format;    // format the entry was stored in (valid when reused > 0)
  // reused_tokens tokens in the requested pool (owner kActive); an empty sequence of that
  // pool on a miss. Append the remaining request tokens to it.
  SequenceCache sequence;
  // With PrefixFetchOptions::recurrent_state: the snapshot at reused_tokens (its position),
  // or null when reused_tokens is 0. Always f32 values (a bf16 snapshot is widened).
  std::shared_ptr<const StateSnapshot> state;
  uint32_t state_trimmed_tokens = 0;  // K/V tokens matched but dropped for lack of a snapshot
  // Where the fetch's time went, microseconds (wall clock; for the engine's cache log).
  struct Times {
    uint32_t tier_chain_us = 0;   // asking the lower tier for a longer chain, loading it
    uint32_t match_us = 0;        // the RAM walk (under the lock)
    uint32_t convert_us = 0;      // another format or pool: the blocks converted
    uint32_t state_us = 0;        // the RAM snapshot lookup (hashing the candidate prefixes)
    uint32_t state_tier_us = 0;   // the lower tier's snapshot lookup and read
    uint32_t state_widen_us = 0;  // a bf16 snapshot widened to f32
  } times;
};

struct PrefixStoreResult {
  uint32_t stored_tokens = 0;   // min(tokens, sequence size)
  uint32_t new_blocks = 0;      // blocks the tree took
  uint32_t shared_blocks = 0;   // blocks already in the tree, reused
  bool quantized = false;       // stored in store_format
  uint32_t evicted_blocks = 0;  // evicted to make room
  // Blocks handed to the lower tier by this store: the entry's new blocks under
  // write-through, or every block of an entry RAM could not hold (then new_blocks is 0 and
  // RAM is unchanged: the entry lives in the lower tier only).
  uint32_t written_through_blocks = 0;
  bool lower_tier_only = false;  // the entry did not fit in RAM and went to the lower tier
};

struct PrefixFormatStats {
  Format k_format, v_format;      // the namespace's formats (compare these, print name())
  uint64_t blocks = 0;
  uint64_t bytes = 0;             // blocks * block_stride
  uint64_t tokens = 0;            // tokens held by those blocks
  uint64_t exclusive_bytes = 0;   // of bytes, blocks only the tree references (evicting frees)
};

struct PrefixCacheStats {
  uint64_t lookups = 0;
  std::array<uint64_t, kNumPrefixMatchKinds> hits{};  // [kind]; hits[kMiss] counts misses
  uint64_t tokens_requested = 0;   // sum of fetched request sizes
  uint64_t tokens_reused = 0;      // sum of reused_tokens
  uint64_t converted_fetches = 0;
  uint64_t stores = 0;
  uint64_t quantized_stores = 0;
  uint64_t failed_stores = 0;      // ResourceExhausted
  uint64_t stored_tokens = 0;
  uint64_t evicted_blocks = 0;
  uint64_t evicted_bytes = 0;
  uint64_t promoted_blocks = 0;    // read from the lower tier into RAM
  uint64_t promote_failures = 0;   // lower-tier blocks that failed to load (then a miss)
  uint64_t written_through_blocks = 0;  // blocks given to the lower tier at store time
  uint64_t lower_only_stores = 0;  // entries too large for RAM, stored in the lower tier only
  uint64_t direct_tier_fetches = 0;  // hits served from lower-tier blocks RAM could not keep
  // Recurrent-state snapshots (StoreState; Fetch with recurrent_state).
  uint64_t state_fetches = 0;      // fetches that asked for a snapshot
  uint64_t state_hits = 0;         // ... and got one (RAM or lower tier)
  uint64_t state_tier_hits = 0;    // ... from the lower tier
  uint64_t state_stores = 0;       // snapshots stored
  uint64_t state_evictions = 0;    // snapshots evicted from RAM (then spilled, if a tier)
  uint64_t states = 0;             // snapshots held in RAM
  uint64_t state_bytes = 0;        // their bytes (counted in `bytes` too)
  uint64_t entries = 0;            // stored entries currently present (end markers)
  uint64_t nodes = 0;              // blocks referenced by the tree
  uint64_t bytes = 0;              // their bytes: what counts against the budget
  uint64_t pinned_bytes = 0;
  uint64_t budget_bytes = 0;
  std::vector<PrefixFormatStats> by_format;  // one per namespace
};

// One stored entry of the RAM tier, as the status page lists it (PrefixCache::Hottest).
struct PrefixEntryInfo {
  uint32_t tokens = 0;          // the entry's length
  uint32_t blocks = 0;          // blocks on its path (shared with other entries or not)
  Format k_format, v_format;    // its namespace's formats
  uint64_t hits = 0;            // fetches that reused tokens of its last block
  uint64_t idle_ms = 0;         // since a fetch or a store last touched its last block
  bool in_use = false;          // its last block is held by a request or a tier write too
  bool pinned = false;
  std::vector<int32_t> head;    // its first min(tokens, head_tokens) tokens (Hottest's argument)
};

class PrefixCache {
 public:
  static Result<std::unique_ptr<PrefixCache>> Create(PrefixCacheOptions options);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // Longest cached prefix of `tokens` for `model`, as a sequence of `pool` (its shape must be
  // the entries'). Entries in another format or pool are converted (outside the lock).
  // InvalidArgument for empty tokens or a negative id; ResourceExhausted if `pool` cannot hold
  // the conversion (then nothing changed but the statistics).
  Result<PrefixFetchResult> Fetch(const ModelFingerprint& model, std::span<const int32_t> tokens,
                                  const std::shared_ptr<BlockPool>& pool);
  // The same, with options (recurrent_state: resume from the longest snapshot at or before
  // the K/V match; see PrefixFetchOptions).
  Result<PrefixFetchResult> Fetch(const ModelFingerprint& model, std::span<const int32_t> tokens,
                                  const std::shared_ptr<BlockPool>& pool,
                                  const PrefixFetchOptions& options);

  // Keeps `snapshot`, the state of `model` after `tokens` (snapshot->position ==
  // tokens.size() >= 1), beside the K/V blocks. It counts against the memory budget
  // (snapshot->bytes()), is evicted LRU together with the leaves (never while a fetch's
  // caller still holds it) and goes to the lower tier when evicted, or at once under
  // write-through. A snapshot larger than the budget goes to the lower tier alone, or is
  // ResourceExhausted without one. Storing the same key again only touches it.
  Status StoreState(const ModelFingerprint& model, std::span<const int32_t> tokens,
                    std::shared_ptr<const StateSnapshot> snapshot);

  // Stores the first min(tokens.size(), sequence.size()) tokens of `sequence` (complete()
  // required; tokens[i] is the token whose K/V is at position i). The sequence is left as it
  // was; the rvalue overload releases it once stored, so a quantized store never leaves the
  // request holding a second full copy.
  Result<PrefixStoreResult> Store(const ModelFingerprint& model, std::span<const int32_t> tokens,
                                  const SequenceCache& sequence);
  Result<PrefixStoreResult> Store(const ModelFingerprint& model, std::span<const int32_t> tokens,
                                  SequenceCache&& sequence);

  // Keeps every block on the path of `tokens` (stored now or later) from eviction until
  // Unpin with the same tokens. Pins count; pinned blocks still count against the budget.
  Status Pin(const ModelFingerprint& model, std::span<const int32_t> tokens);
  // NotFound if these tokens are not pinned.
  Status Unpin(const ModelFingerprint& model, std::span<const int32_t> tokens);

  // Evicts least recently used leaves until at least `bytes` were freed or nothing more can
  // go; returns the bytes freed (e.g. when the active pool runs out).
  uint64_t Evict(uint64_t bytes);
  // Drops every entry (no eviction callbacks); pins are kept.
  void Clear();

  // exclusive_bytes = false skips the walk of the tree that counts
  // PrefixFormatStats::exclusive_bytes (left 0): O(namespaces) under the lock instead of O(nodes).
  PrefixCacheStats Stats(bool exclusive_bytes = true) const;
  // The `n` hottest stored entries: most hits first, then most recently used, then longest.
  // One walk of the tree under the lock, O(nodes + entries log n); the entries' first
  // `head_tokens` tokens are copied for the n kept only.
  std::vector<PrefixEntryInfo> Hottest(size_t n, size_t head_tokens = 0) const;
  const PrefixCacheOptions& options() const;
  // Checks the tree: references, byte counts, leaf list, LRU order, prefix-free siblings,
  // markers, pins. O(nodes); tests.
  Status CheckInvariants() const;

 private:
  struct Impl;
  explicit PrefixCache(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier
