// Key names and namespace records of the remote tier (remote/remote_keys.h).
#include "remote/remote_keys.h"

#include <hiredis.h>

#include "kvtier/block_key.h"
#include "kvtier/remote_tier.h"

namespace kvtier::remote {

namespace {

bool ParseHex128(std::string_view s, Hash128* out) {
  if (s.size() != 32) return false;
  uint64_t v[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    const char c = s[i];
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return false;
    v[i / 16] = (v[i / 16] << 4) | static_cast<uint64_t>(d);
  }
  out->hi = v[0];
  out->lo = v[1];
  return true;
}

bool ParseU32(std::string_view s, uint32_t* out) {
  if (s.empty() || s.size() > 10) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > UINT32_MAX) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

}  // namespace

std::string KeyPrefix() { return "kvt:" + std::to_string(kRemoteFormatVersion) + ":"; }

std::string BlockRedisKey(const BlockKey& ns, const BlockKey& block) {
  return KeyPrefix() + ns.ToHex() + ":" + block.ToHex();
}

std::string NamespaceSetKey(const ModelFingerprint& model) {
  return KeyPrefix() + "ns:" + model.ToHex();
}

std::string NamespaceMember(const TierNamespace& ns) {
  return ns.key.ToHex() + ":" + ns.model.ToHex() + ":" + std::to_string(ns.shape.n_layers) +
         ":" + std::to_string(ns.shape.n_kv_heads) + ":" + std::to_string(ns.shape.head_dim) +
         ":" + std::to_string(ns.k_format.id()) + ":" + std::to_string(ns.v_format.id()) + ":" +
         std::to_string(ns.block_tokens);
}

Result<TierNamespace> ParseNamespaceMember(std::string_view member) {
  std::vector<std::string_view> f;
  size_t at = 0;
  while (at <= member.size()) {
    const size_t c = std::min(member.find(':', at), member.size());
    f.push_back(member.substr(at, c - at));
    at = c + 1;
  }
  auto bad = [&](const std::string& why) {
    return Status::Corruption("remote namespace record '" + std::string(member) + "': " + why);
  };
  if (f.size() != 8) return bad("expected 8 fields, got " + std::to_string(f.size()));
  TierNamespace ns;
  uint32_t k_id = 0, v_id = 0;
  if (!ParseHex128(f[0], &ns.key) || !ParseHex128(f[1], &ns.model)) return bad("bad key");
  if (!ParseU32(f[2], &ns.shape.n_layers) || !ParseU32(f[3], &ns.shape.n_kv_heads) ||
      !ParseU32(f[4], &ns.shape.head_dim) || !ParseU32(f[5], &k_id) || !ParseU32(f[6], &v_id) ||
      !ParseU32(f[7], &ns.block_tokens)) {
    return bad("bad number");
  }
  Result<Format> k = Format::FromId(k_id);
  Result<Format> v = Format::FromId(v_id);
  if (!k.ok() || !v.ok()) return bad("unknown format id");
  ns.k_format = *k;
  ns.v_format = *v;
  if (!ns.shape.Validate().ok() || ns.block_tokens == 0) return bad("bad shape");
  if (!(NamespaceKey(ns.model, ns.shape, ns.k_format, ns.v_format, ns.block_tokens) == ns.key)) {
    return bad("the key does not match the fields");
  }
  return ns;
}

bool ParseBlockRedisKey(std::string_view name, BlockKey* ns, BlockKey* block) {
  const std::string prefix = KeyPrefix();
  if (name.substr(0, prefix.size()) != prefix) return false;
  name.remove_prefix(prefix.size());
  if (name.size() != 65 || name[32] != ':') return false;
  return ParseHex128(name.substr(0, 32), ns) && ParseHex128(name.substr(33), block);
}

bool ParseStateRedisKey(std::string_view name, BlockKey* key) {
  const std::string prefix = KeyPrefix() + "st:";
  if (name.substr(0, prefix.size()) != prefix) return false;
  name.remove_prefix(prefix.size());
  return name.size() == 32 && ParseHex128(name, key);
}

std::vector<std::string_view> ArrayStrings(const RedisResult& r) {
  std::vector<std::string_view> out;
  if (r.reply == nullptr || r.reply->type != REDIS_REPLY_ARRAY) return out;
  for (size_t i = 0; i < r.reply->elements; ++i) {
    const redisReply* e = r.reply->element[i];
    if (e->type == REDIS_REPLY_STRING) out.emplace_back(e->str, e->len);
  }
  return out;
}

std::string ScanReply(const RedisResult& r, std::vector<std::string>* keys) {
  const redisReply* t = r.reply.get();
  if (t == nullptr || t->type != REDIS_REPLY_ARRAY || t->elements != 2 ||
      t->element[0]->type != REDIS_REPLY_STRING || t->element[1]->type != REDIS_REPLY_ARRAY) {
    return "";
  }
  const redisReply* list = t->element[1];
  for (size_t i = 0; i < list->elements; ++i) {
    if (list->element[i]->type == REDIS_REPLY_STRING) {
      keys->emplace_back(list->element[i]->str, list->element[i]->len);
    }
  }
  return std::string(t->element[0]->str, t->element[0]->len);
}

}  // namespace kvtier::remote
