// The remote tier's Redis key names and namespace records (kvtier/remote_tier.h). Pure
// functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kvtier/prefix_cache.h"
#include "kvtier/status.h"
#include "remote/redis_client.h"

namespace kvtier::remote {

// "kvt:1:" (the format version is kRemoteFormatVersion).
std::string KeyPrefix();
// "kvt:1:<namespace hex>:<block hex>".
std::string BlockRedisKey(const BlockKey& ns, const BlockKey& block);
// "kvt:1:ns:<model hex>": the set of the model's namespaces.
std::string NamespaceSetKey(const ModelFingerprint& model);
// A namespace as a set member: "<ns hex>:<model hex>:<layers>:<kv heads>:<head dim>:<k format
// id>:<v format id>:<block tokens>".
std::string NamespaceMember(const TierNamespace& ns);
// The member parsed and checked (its key must be NamespaceKey of the rest).
Result<TierNamespace> ParseNamespaceMember(std::string_view member);
// A block key's namespace and block from its name; false for any other key.
bool ParseBlockRedisKey(std::string_view name, BlockKey* ns, BlockKey* block);
// A state snapshot key's snapshot key from its name ("kvt:1:st:<32 hex>"); false for any
// other key.
bool ParseStateRedisKey(std::string_view name, BlockKey* key);
// The string elements of an array reply.
std::vector<std::string_view> ArrayStrings(const RedisResult& r);
// SCAN's reply [cursor, [keys...]]: the cursor ("" if malformed) and the keys.
std::string ScanReply(const RedisResult& r, std::vector<std::string>* keys);

}  // namespace kvtier::remote
