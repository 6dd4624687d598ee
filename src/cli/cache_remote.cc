// `kvtier cache stats|verify|clear --remote redis://...` (cache_cmd.h): the shared remote tier.
#include <nlohmann/json.hpp>
#include <ostream>

#include "cli/cache_cmd.h"
#include "kvtier/remote_tier.h"

namespace kvtier::cli {

Status RunRemoteCacheCommand(const CacheCommand& c, std::ostream& out) {
  RemoteTierOptions o;
  o.url = c.remote;
  o.deadline_ms = 2000;  // an administrator waits longer than a request
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<RemoteTier> tier, RemoteTier::Open(o));
  if (c.action == "clear") {
    KVTIER_ASSIGN_OR_RETURN(const uint64_t n, tier->Clear());
    if (c.json) {
      out << nlohmann::json{{"remote", c.remote}, {"removed_keys", n}}.dump(2) << "\n";
    } else {
      out << c.remote << ": removed " << n << " keys\n";
    }
    return Status::OK();
  }
  if (c.action != "stats" && c.action != "verify") {
    return Status::InvalidArgument("cache " + c.action + ": not for --remote");
  }
  const bool verify = c.action == "verify";
  KVTIER_ASSIGN_OR_RETURN(const RemoteScan s, tier->Scan(verify));
  if (c.json) {
    nlohmann::json j{{"remote", c.remote}, {"masters", s.masters}, {"blocks", s.blocks},
                     {"state_snapshots", s.states}, {"other_keys", s.other_keys}};
    if (verify) {
      j["bytes"] = s.bytes;
      j["good"] = s.good;
      j["bad"] = s.bad;
      j["state_bytes"] = s.state_bytes;
      j["state_good"] = s.state_good;
      j["state_bad"] = s.state_bad;
    }
    j["namespaces"] = nlohmann::json::array();
    for (const auto& [ns, blocks] : s.namespaces) {
      j["namespaces"].push_back({{"key", ns.key.ToHex()}, {"model", ns.model.ToHex()},
                                 {"n_layers", ns.shape.n_layers},
                                 {"n_kv_heads", ns.shape.n_kv_heads},
                                 {"head_dim", ns.shape.head_dim},
                                 {"k_format", ns.k_format.spec()},
                                 {"v_format", ns.v_format.spec()},
                                 {"block_tokens", ns.block_tokens}, {"blocks", blocks}});
    }
    out << j.dump(2) << "\n";
  } else {
    out << c.remote << ": " << s.blocks << " blocks on " << s.masters.size()
        << (s.masters.size() == 1 ? " Redis" : " masters");
    if (verify) out << "; " << s.good << " verified, " << s.bad << " failed (removed)";
    if (s.states > 0) {
      out << "; " << s.states << " state snapshots";
      if (verify) {
        out << " (" << s.state_good << " verified, " << s.state_bad << " failed, removed)";
      }
    }
    if (s.other_keys > 0) out << "; " << s.other_keys << " keys of other format versions";
    out << "\n";
    for (const auto& [ns, blocks] : s.namespaces) {
      out << "  model " << ns.model.ToHex() << "  " << ns.shape.ToString() << "  K "
          << ns.k_format.spec() << " / V " << ns.v_format.spec() << "  " << ns.block_tokens
          << "-token blocks: " << blocks << "\n";
    }
  }
  if (verify && (s.bad > 0 || s.state_bad > 0)) {
    return Status::Corruption(std::to_string(s.bad) + " remote blocks and " +
                              std::to_string(s.state_bad) +
                              " state snapshots failed verification and were removed");
  }
  return Status::OK();
}

}  // namespace kvtier::cli
