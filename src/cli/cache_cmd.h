// `kvtier cache stats|verify|clear --dir D` and `kvtier cache formats`: the SSD tier's
// directory from the command line. Stateless; one command per call.
#pragma once

#include <iosfwd>
#include <string>

#include "kvtier/status.h"

namespace kvtier::cli {

struct CacheCommand {
  std::string action;  // "stats", "verify", "clear", "formats"
  std::string dir;
  std::string remote;  // redis://...: the remote tier instead of a directory (cache_remote.cc)
  bool json = false;
};

// Runs it: stats and formats print a table (or JSON); verify fails when a file is bad.
Status RunCacheCommand(const CacheCommand& cmd, std::ostream& out);
// stats|verify|clear of the remote tier at cmd.remote (Redis / Redis Cluster).
Status RunRemoteCacheCommand(const CacheCommand& cmd, std::ostream& out);

}  // namespace kvtier::cli
