// RadixTree: the prefix cache's data structure, without locking or policy. One tree per
// namespace (model, KV shape, formats, block size); a node is one pool block of tokens.
//
//   root (no block)
//    +- full node: block_tokens tokens, may have children (full ones by key, tails in a list)
//    |    +- tail node: 1..block_tokens-1 tokens, always a leaf
//    +- ...
//
// Invariants (CheckInvariants): every node holds one kPrefixCache reference on its block;
// siblings are prefix-free (no child's tokens start another child's); `ends` lists the
// lengths, inside the node, at which a stored entry ends; a leaf's tick is the key of its
// entry in the leaf set; a parent's tick is >= its children's (every touch covers a whole
// path from the root), so evicting leaves in tick order is LRU over entries.
//
// Owned by PrefixCache::Impl, which serializes every call under its mutex. Not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/block_pool.h"
#include "kvtier/prefix_cache.h"
#include "kvtier/status.h"

namespace kvtier::prefix {

struct Namespace;

struct Node {
  Namespace* ns = nullptr;
  Node* parent = nullptr;
  BlockKey key;                  // ChainBlockKey(parent->key, tokens)
  uint32_t start = 0;            // position of tokens[0]
  std::vector<int32_t> tokens;   // [1, block_tokens] (empty for a root)
  BlockId block = -1;            // -1 for a root
  std::vector<uint32_t> ends;    // sorted, each in [1, tokens.size()]
  std::unordered_map<BlockKey, std::unique_ptr<Node>, Hash128Hasher> full;  // full children
  std::vector<std::unique_ptr<Node>> tails;  // children of fewer than block_tokens tokens
  uint64_t tick = 0;             // last touch
  int64_t used_ms = 0;           // steady-clock time of the last touch (the status page)
  uint64_t hits = 0;             // fetches that reused tokens of this node
  uint32_t pins = 0;             // pin lists whose path enters this node

  bool is_root() const { return parent == nullptr; }
  bool is_leaf() const { return full.empty() && tails.empty(); }
  uint32_t end() const { return start + static_cast<uint32_t>(tokens.size()); }
  bool HasEnd(uint32_t len) const;
  void AddEnd(uint32_t len);
};

struct Namespace {
  BlockKey key;
  ModelFingerprint model;
  KvShape shape;
  Format k_format, v_format;
  uint32_t block_tokens = 0;
  std::shared_ptr<BlockPool> pool;
  bool owned_pool = false;       // created by the cache for its store format
  uint64_t block_bytes = 0;      // pool->layout().block_stride
  Node root;
  uint64_t blocks = 0;           // nodes below root
  uint64_t tokens = 0;           // sum of their token counts
  uint64_t entries = 0;          // sum of their ends
};

// The longest path of the tree along a token list.
struct Match {
  std::vector<Node*> path;   // nodes entered, root excluded; the last may be entered partly
  uint32_t matched = 0;      // tokens matched
  bool entry_end = false;    // a stored entry ends exactly at `matched`
};

// What storing a token list would do to each of its blocks (computed and applied under one
// lock hold).
struct PlanStep {
  enum Kind : uint8_t {
    kExisting,  // a full node with these tokens: keep it (our block is not needed)
    kUpgrade,   // a tail node whose tokens start this full block: it takes our block
    kExtend,    // a tail node whose tokens start our (longer) tail: it takes our block
    kMarker,    // a node whose tokens start with our tail: just mark the entry end
    kNew,       // a new node with our block
  };
  Kind kind = kNew;
  Node* node = nullptr;  // for every kind but kNew
};
struct Plan {
  std::vector<PlanStep> steps;  // one per block of the stored tokens
  uint32_t new_blocks = 0;
  uint32_t existing_full = 0;   // leading kExisting steps: blocks already stored, in order
};

class RadixTree {
 public:
  RadixTree() = default;
  ~RadixTree();
  RadixTree(const RadixTree&) = delete;
  RadixTree& operator=(const RadixTree&) = delete;

  Namespace* Find(const BlockKey& ns_key);
  Namespace* Add(std::unique_ptr<Namespace> ns);
  const std::vector<std::unique_ptr<Namespace>>& namespaces() const { return namespaces_; }

  Match Walk(Namespace& ns, std::span<const int32_t> tokens) const;
  Plan MakePlan(Namespace& ns, std::span<const int32_t> tokens) const;
  // Sets the tick of every node in `path` (a root-first chain), and its used_ms to now.
  void Touch(std::span<Node* const> path, uint64_t tick);
  // Applies `plan` for `tokens`: blocks[i] holds tokens [i * B, (i + 1) * B). New and taken
  // blocks gain a kPrefixCache reference (blocks must be live in ns.pool). `pin_lists` are
  // the namespace model's pins. Touches the whole path with `tick`.
  Status Apply(Namespace& ns, const Plan& plan, std::span<const int32_t> tokens,
               std::span<const BlockId> blocks, uint64_t tick,
               std::span<const std::vector<int32_t>* const> pin_lists);

  // Least recently used leaf with tick < max_tick that is unpinned and referenced only by
  // the tree, or null.
  Node* EvictionCandidate(uint64_t max_tick) const;
  // Removes a leaf: calls on_evict (if set), drops the reference. Returns the bytes dropped.
  uint64_t RemoveLeaf(Node* leaf, const EvictionCallback& on_evict);
  // Adds `delta` (+1 / -1) to the pins of every node the path of `tokens` enters, in every
  // namespace of `model`.
  void AddPins(const ModelFingerprint& model, std::span<const int32_t> tokens, int delta);
  // Removes every node (no callbacks).
  void Clear();

  uint64_t bytes() const { return bytes_; }
  uint64_t pinned_bytes() const;
  // `pins`: every pin list with its model (a list pinned twice appears twice).
  Status CheckInvariants(
      std::span<const std::pair<ModelFingerprint, std::vector<int32_t>>> pins) const;

 private:
  void InsertLeaf(Node* n) { leaves_.emplace(n->tick, n); }
  void EraseLeaf(Node* n) { leaves_.erase({n->tick, n}); }
  void SetTick(Node* n, uint64_t tick);
  // Replaces n's block by `block` (same pool) and its tokens by `tokens`.
  Status TakeBlock(Node* n, BlockId block, std::span<const int32_t> tokens);
  void DropSubtree(Node* n);
  struct CheckTotals;
  Status CheckNode(const Node& n, std::vector<int32_t>& path,
                   std::span<const std::vector<int32_t>* const> pins, CheckTotals& t) const;

  std::vector<std::unique_ptr<Namespace>> namespaces_;
  std::set<std::pair<uint64_t, Node*>> leaves_;  // (tick, node) of every non-root leaf
  uint64_t bytes_ = 0;                            // blocks referenced, in bytes
};

// Milliseconds of the steady clock (Node::used_ms).
int64_t SteadyNowMs();

// Number of leading tokens a and b share.
uint32_t CommonPrefix(std::span<const int32_t> a, std::span<const int32_t> b);

}  // namespace kvtier::prefix
