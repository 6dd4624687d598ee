// Internals of `kvtier-bench ssd` (bench_ssd.h) shared by its two halves: the run's scratch
// directory, page-cache control for the files it wrote, opening the tier, and the TTFT half.
// Owned by the cli module; not API. Functions are thread-compatible; ScratchDir is move-only.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "cli/bench_ssd.h"
#include "kvtier/ssd_tier.h"
#include "kvtier/status.h"

namespace kvtier::cli::ssd_bench {

// A fresh directory <parent>/kvtier-bench-ssd-XXXXXX, removed with everything in it when the
// object is destroyed.
class ScratchDir {
 public:
  static Result<ScratchDir> Create(const std::string& parent);
  ScratchDir(ScratchDir&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  ScratchDir& operator=(ScratchDir&&) = delete;
  ScratchDir(const ScratchDir&) = delete;
  ~ScratchDir();
  const std::string& path() const { return path_; }

 private:
  explicit ScratchDir(std::string p) : path_(std::move(p)) {}
  std::string path_;
};

// Drops the page cache of `path` (a file, or every file under a directory) with
// posix_fadvise(DONTNEED). Only clean pages go: call it on synced files. Best effort.
void DropPageCache(const std::string& path);
// Percentage of the file's pages in the page cache (mincore); -1 if it cannot tell.
double ResidentPct(const std::string& path);

// SsdTier::Open on `dir` (created if missing) through Env::Default(), a cap far above what the
// benchmark writes, quarantine logging on; c.writer_threads (0: the tier's default) and
// c.ssd_sync and c.ssd_layout (empty: the tier's default).
Result<std::shared_ptr<SsdTier>> OpenBenchTier(const std::string& dir, const BenchSsdConfig& c);
// "per-file" / "syncfs" for a mode; the mode of a --ssd-sync value (InvalidArgument if unknown).
const char* SyncModeName(SsdSyncMode mode);
Result<SsdSyncMode> ParseSyncMode(const std::string& name);
// "segments" / "files" for a layout; the layout of a --ssd-layout value.
const char* LayoutName(SsdLayout layout);
Result<SsdLayout> ParseLayout(const std::string& name);

// The TTFT half (bench_ssd_ttft.cc): its progress steps, and the run in <root>/ttft.
int TtftSteps(const BenchSsdConfig& c);
Result<BenchSsdTtft> RunTtft(const BenchSsdConfig& c, const std::string& root,
                             const std::function<void()>& step);

}  // namespace kvtier::cli::ssd_bench
