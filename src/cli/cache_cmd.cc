// `kvtier cache ...` (cache_cmd.h): opens the SSD tier's directory through the real Env.
#include "cli/cache_cmd.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>

#include "kvtier/env.h"
#include "kvtier/ssd_tier.h"

namespace kvtier::cli {
namespace {

Result<std::shared_ptr<SsdTier>> OpenDir(const std::string& dir) {
  if (dir.empty()) return Status::InvalidArgument("--dir: required");
  if (!Env::Default()->FileExists(dir)) {
    return Status::InvalidArgument("--dir: " + dir + " does not exist");
  }
  SsdTierOptions o;
  o.dir = dir;
  o.max_bytes = UINT64_MAX;  // looking must not evict
  return SsdTier::Open(std::move(o));
}

uint64_t QuarantinedFiles(const std::string& dir) {
  Result<std::vector<DirEntry>> q = Env::Default()->ListDir(dir + "/quarantine");
  return q.ok() ? q->size() : 0;
}

std::string Gb(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f GB", static_cast<double>(b) / 1e9);
  return buf;
}

Status Stats(const CacheCommand& c, std::ostream& out) {
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<SsdTier> tier, OpenDir(c.dir));
  const SsdTierStats s = tier->Stats();
  const auto namespaces = tier->AllNamespaces();
  const uint64_t quarantined = QuarantinedFiles(c.dir);
  if (c.json) {
    nlohmann::json j;
    j["dir"] = c.dir;
    j["blocks"] = s.blocks;
    j["bytes"] = s.bytes;
    j["files"] = s.files;
    j["dead_bytes"] = s.dead_bytes;
    j["quarantined_files"] = quarantined;
    j["removed_tmp_files"] = s.removed_tmp_files;
    j["open_ms"] = s.open_ms;
    j["namespaces"] = nlohmann::json::array();
    for (const auto& [ns, blocks] : namespaces) {
      j["namespaces"].push_back({{"key", ns.key.ToHex()},
                                 {"model", ns.model.ToHex()},
                                 {"n_layers", ns.shape.n_layers},
                                 {"n_kv_heads", ns.shape.n_kv_heads},
                                 {"head_dim", ns.shape.head_dim},
                                 {"k_format", ns.k_format.spec()},
                                 {"v_format", ns.v_format.spec()},
                                 {"block_tokens", ns.block_tokens},
                                 {"blocks", blocks}});
    }
    out << j.dump(2) << "\n";
    return Status::OK();
  }
  out << c.dir << ": " << s.blocks << " blocks in " << s.files << " files, " << Gb(s.bytes)
      << " (" << Gb(s.dead_bytes) << " of records no longer indexed); " << quarantined
      << " quarantined; index rebuilt from the headers in " << s.open_ms << " ms";
  if (s.removed_tmp_files > 0) out << "; removed " << s.removed_tmp_files << " .tmp files";
  out << "\n";
  for (const auto& [ns, blocks] : namespaces) {
    out << "  model " << ns.model.ToHex() << "  " << ns.shape.ToString() << "  K "
        << ns.k_format.spec() << " / V " << ns.v_format.spec() << "  " << ns.block_tokens
        << "-token blocks: " << blocks << "\n";
  }
  return Status::OK();
}

Status Verify(const CacheCommand& c, std::ostream& out) {
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<SsdTier> tier, OpenDir(c.dir));
  // One summary, one unit per count: blocks checked, and files moved to quarantine/ (those
  // whose headers failed at open, and those holding a block whose payload failed now).
  const uint64_t at_open = tier->Stats().quarantined;
  uint64_t good = 0, bad = 0;
  KVTIER_RETURN_IF_ERROR(tier->Verify(&good, &bad));
  const uint64_t quarantined = tier->Stats().quarantined;
  if (c.json) {
    out << nlohmann::json{{"good", good},
                          {"bad", bad},
                          {"quarantined", quarantined},
                          {"quarantined_at_open", at_open},
                          {"quarantined_by_verify", quarantined - at_open}}
               .dump(2)
        << "\n";
  } else {
    out << c.dir << ": " << good << " blocks verified, " << bad
        << " failed the payload check; " << quarantined << " files moved to quarantine/ ("
        << at_open << " with a damaged header at open, " << quarantined - at_open
        << " holding a failed block)\n";
  }
  if (bad > 0 || quarantined > 0) {
    return Status::Corruption(std::to_string(quarantined) + " damaged files moved to " + c.dir +
                              "/quarantine/ (" + std::to_string(bad) +
                              " blocks failed the payload check)");
  }
  return Status::OK();
}

Status Clear(const CacheCommand& c, std::ostream& out) {
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<SsdTier> tier, OpenDir(c.dir));
  const uint64_t blocks = tier->Stats().blocks;
  KVTIER_RETURN_IF_ERROR(tier->Clear());
  uint64_t quarantined = 0;
  Env* env = Env::Default();
  if (Result<std::vector<DirEntry>> q = env->ListDir(c.dir + "/quarantine"); q.ok()) {
    for (const DirEntry& e : *q) quarantined += env->RemoveFile(c.dir + "/quarantine/" + e.name).ok();
  }
  out << c.dir << ": removed " << blocks << " blocks and " << quarantined
      << " quarantined files\n";
  return Status::OK();
}

// Every format through a block file and a segment and back, checked now: the support matrix.
Status Formats(const CacheCommand& c, std::ostream& out) {
  KVTIER_ASSIGN_OR_RETURN(const std::vector<StoredFormatCheck> checks, CheckStoredFormats());
  nlohmann::json rows = nlohmann::json::array();
  if (!c.json) {
    out << "format            id          bits/value  bytes/row(128)  on disk          round trip\n";
  }
  for (const StoredFormatCheck& k : checks) {
    const Format& f = k.format;
    char id[16];
    std::snprintf(id, sizeof id, "0x%08x", f.id());
    if (c.json) {
      rows.push_back({{"format", f.spec()}, {"id", f.id()}, {"bits_per_value", f.bits_per_value()},
                      {"row_bytes_128", f.row_bytes(128)}, {"stored", "native"},
                      {"round_trip_bit_exact", k.block_file_bit_exact},
                      {"segment_round_trip_bit_exact", k.segment_bit_exact}});
    } else {
      char line[160];
      std::snprintf(line, sizeof line, "%-17s %-11s %-11.3f %-15zu %-16s %s\n", f.spec().c_str(),
                    id, f.bits_per_value(), f.row_bytes(128), "native",
                    k.block_file_bit_exact && k.segment_bit_exact ? "bit for bit" : "MISMATCH");
      out << line;
    }
    if (!k.block_file_bit_exact || !k.segment_bit_exact) {
      return Status::Internal("format " + f.spec() + " did not round-trip");
    }
  }
  if (c.json) out << rows.dump(2) << "\n";
  return Status::OK();
}

}  // namespace

Status RunCacheCommand(const CacheCommand& cmd, std::ostream& out) {
  if (!cmd.remote.empty()) {
    if (!cmd.dir.empty()) {
      return Status::InvalidArgument("cache " + cmd.action + ": give --dir or --remote, not both");
    }
    return RunRemoteCacheCommand(cmd, out);
  }
  if (cmd.dir.empty() && cmd.action != "formats") {
    return Status::InvalidArgument("cache " + cmd.action + ": --dir (or --remote) is required");
  }
  if (cmd.action == "stats") return Stats(cmd, out);
  if (cmd.action == "verify") return Verify(cmd, out);
  if (cmd.action == "clear") return Clear(cmd, out);
  if (cmd.action == "formats") return Formats(cmd, out);
  return Status::InvalidArgument("cache: unknown action '" + cmd.action + "'");
}

}  // namespace kvtier::cli
