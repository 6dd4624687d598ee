// Recurrent-state snapshots: the cache object of models whose layers keep a state instead of
// (or beside) per-token K/V rows, e.g. qwen35's Gated DeltaNet layers (a causal-conv window
// and a delta-rule matrix per layer). A snapshot is a sequence's whole recurrent state after
// its first `position` tokens; with the K/V rows of those tokens (the prefix cache's blocks)
// it is everything needed to resume the sequence at `position`.
//
// The prefix cache keeps snapshots beside the KV blocks (PrefixCache::StoreState, Fetch with
// PrefixFetchOptions::recurrent_state), the SSD tier spills and reloads them
// (docs/ssd-tier.md, "state records"). A snapshot is found by its key: the model and every
// token before `position` (StateSnapshotKey), so any tier can find it after a restart.
//
// Encoded form (EncodeStateSnapshot; all little-endian):
//   offset  0  u32 magic 0x5453564B ("KVST")
//           4  u32 version: 1 for f32 values (the bytes of every earlier build), 2 for bf16
//           8  u32 format: what the tensors are (the model's state layout id, see `format`)
//          12  u32 position: tokens consumed
//          16  u32 n_tensors
//          20  u32 value type: version 1: reserved, 0 (f32); version 2: 1 (bf16)
//          24  u64 payload_bytes = 4 * n_tensors + value bytes (4 or 2 each), padded with
//              zeros to a multiple of 4
//          32  u32 payload CRC-32C
//          36  u32 header CRC-32C of bytes [0, 36)
//          40  payload: n_tensors u32 sizes (values per tensor), then the tensors
// Plain values and pure functions; thread-safe. Snapshots are shared as
// std::shared_ptr<const StateSnapshot> (immutable once made).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/status.h"

namespace kvtier {

inline constexpr uint32_t kStateSnapshotMagic = 0x5453564Bu;  // "KVST"
inline constexpr uint32_t kStateSnapshotVersion = 2;  // the newest read and written

// How a snapshot keeps its values (PrefixCacheOptions::state_type, `--state-type`). bf16
// halves the bytes in every tier; a model reads f32 (ToF32 widens exactly).
enum class StateType : uint32_t { kF32 = 0, kBF16 = 1 };
// "f32" / "bf16".
std::string_view StateTypeName(StateType t);
Result<StateType> ParseStateType(std::string_view name);
inline constexpr size_t kStateSnapshotHeaderBytes = 40;

struct StateSnapshot {
  // The producer's state layout (Model::state_format(): a hash of the architecture and the
  // state's shapes, never 0). A consumer refuses a snapshot of another format.
  uint32_t format = 0;
  uint32_t position = 0;          // tokens the state has consumed (>= 1)
  std::vector<uint32_t> sizes;    // [n_tensors] values per tensor
  StateType type = StateType::kF32;
  std::vector<float> data;        // kF32: [sum(sizes)] the tensors, one after another
  std::vector<uint16_t> bf16;     // kBF16: [sum(sizes)] the same as bf16 bits

  uint64_t values() const { return type == StateType::kF32 ? data.size() : bf16.size(); }
  // Size of the encoded form: what the snapshot costs in every tier's budget.
  uint64_t bytes() const {
    const uint64_t v = type == StateType::kF32 ? 4 * data.size() : (2 * bf16.size() + 3) / 4 * 4;
    return kStateSnapshotHeaderBytes + 4 * sizes.size() + v;
  }
};

// The snapshot with its values as `type`: f32 -> bf16 rounds to nearest even; bf16 -> f32
// is exact. The same type gives a copy.
StateSnapshot ConvertStateSnapshot(const StateSnapshot& s, StateType type);

// The encoded form above (bytes() bytes).
std::vector<uint8_t> EncodeStateSnapshot(const StateSnapshot& s);
// Parses and verifies an encoded snapshot: magic, version, sizes, both CRCs. Errors name
// `what` (e.g. a file name), the field and expected vs got (Corruption / InvalidArgument).
Result<StateSnapshot> DecodeStateSnapshot(std::span<const uint8_t> bytes, std::string_view what);

// The key of the snapshot of `model` after `tokens` (its first tokens.size() tokens):
// XXH3-128 of "kvtier-st-v1" (12 bytes), model.lo, model.hi (u64), then each token id (u32).
// Independent of the K/V formats and block size (a state does not depend on them).
BlockKey StateSnapshotKey(const ModelFingerprint& model, std::span<const int32_t> tokens);

// Keys of the snapshots after tokens[0, p) for each p in `positions` (ascending, each
// <= tokens.size()), in one pass over the tokens.
std::vector<BlockKey> StateSnapshotKeys(const ModelFingerprint& model,
                                        std::span<const int32_t> tokens,
                                        std::span<const uint32_t> positions);

}  // namespace kvtier
