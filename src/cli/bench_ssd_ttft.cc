// `kvtier-bench ssd`, the TTFT half and the helpers both halves share (bench_ssd_util.h).
// Owned by the cli module; a single-threaded driver (the model runs on a ThreadPool, the tier
// on its writer threads).
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "base/stats.h"
#include "kvtier/thread_pool.h"
#include "base/timer.h"
#include "cli/bench_ssd_util.h"
#include "cli/flags.h"
#include "cli/model_session.h"
#include "engine/prefill.h"
#include "kvtier/prefix_cache.h"

#ifndef KVTIER_SSD_TEXT
#define KVTIER_SSD_TEXT "data/corpus/eval.txt"
#endif

namespace kvtier::cli::ssd_bench {

Result<ScratchDir> ScratchDir::Create(const std::string& parent) {
  std::string t = parent + "/kvtier-bench-ssd-XXXXXX";
  if (mkdtemp(t.data()) == nullptr) {
    return Status::IOError("bench-ssd: cannot create a directory under " + parent);
  }
  return ScratchDir(std::move(t));
}

ScratchDir::~ScratchDir() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

namespace {

void DropFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

}  // namespace

void DropPageCache(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) {
    DropFile(path);
    return;
  }
  for (auto it = std::filesystem::recursive_directory_iterator(path, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) DropFile(it->path().string());
  }
}

double ResidentPct(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st {};
  double pct = -1;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    const size_t size = static_cast<size_t>(st.st_size);
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
      const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
      std::vector<unsigned char> vec((size + page - 1) / page);  // [pages] residency bits
      if (::mincore(p, size, vec.data()) == 0) {
        size_t in = 0;
        for (unsigned char v : vec) in += v & 1;
        pct = 100.0 * double(in) / double(vec.size());
      }
      ::munmap(p, size);
    }
  }
  ::close(fd);
  return pct;
}

Result<std::shared_ptr<SsdTier>> OpenBenchTier(const std::string& dir, const BenchSsdConfig& c) {
  SsdTierOptions o;
  o.dir = dir;
  o.max_bytes = 1ull << 50;
  if (c.writer_threads > 0) o.writer_threads = c.writer_threads;
  if (!c.ssd_sync.empty()) {
    KVTIER_ASSIGN_OR_RETURN(o.sync_mode, ParseSyncMode(c.ssd_sync));
  }
  if (!c.ssd_layout.empty()) {
    KVTIER_ASSIGN_OR_RETURN(o.layout, ParseLayout(c.ssd_layout));
  }
  return SsdTier::Open(std::move(o));
}

const char* LayoutName(SsdLayout layout) {
  return layout == SsdLayout::kSegments ? "segments" : "files";
}

Result<SsdLayout> ParseLayout(const std::string& name) {
  for (SsdLayout l : {SsdLayout::kSegments, SsdLayout::kBlockFiles}) {
    if (name == LayoutName(l)) return l;
  }
  return Status::InvalidArgument("--ssd-layout: expected 'segments' or 'files', got '" + name + "'");
}

const char* SyncModeName(SsdSyncMode mode) {
  return mode == SsdSyncMode::kPerFile ? "per-file" : "syncfs";
}

Result<SsdSyncMode> ParseSyncMode(const std::string& name) {
  for (SsdSyncMode m : {SsdSyncMode::kPerFile, SsdSyncMode::kFilesystem}) {
    if (name == SyncModeName(m)) return m;
  }
  return Status::InvalidArgument("--ssd-sync: expected per-file or syncfs, got '" + name + "'");
}

namespace {

struct Prompt {
  std::vector<int32_t> tokens;  // [prompt_tokens + new_tokens]
  std::string source;
};

// The BOS when the tokenizer adds one, then the text's tokens (repeated until long enough),
// or seeded random ids below n_vocab (LoadPromptSource).
Result<Prompt> MakePrompt(const LoadedModel& lm, const BenchSsdConfig& c, size_t need) {
  KVTIER_ASSIGN_OR_RETURN(const PromptSource src,
                          LoadPromptSource(lm, c.text, KVTIER_SSD_TEXT, c.seed, need));
  return Prompt{PromptWindow(src, 0, need), src.description};
}

}  // namespace

int TtftSteps(const BenchSsdConfig& c) { return 1 + 2 * (c.cold ? 2 : 1) * 2; }

Result<BenchSsdTtft> RunTtft(const BenchSsdConfig& c, const std::string& root,
                             const std::function<void()>& step) {
  KVTIER_ASSIGN_OR_RETURN(const KvFormats active, ParseKvFormats("--kv-type", c.kv_type));
  KVTIER_ASSIGN_OR_RETURN(LoadedModel lm, LoadModel(c.model));
  const Model& m = *lm.model;
  const ModelConfig& mc = m.config();
  const uint32_t n = c.prompt_tokens;
  if (n + c.new_tokens > mc.n_ctx_train && mc.n_ctx_train > 0) {
    std::fprintf(stderr, "bench-ssd: note: %u tokens exceed the model's training context %u\n",
                 n + c.new_tokens, mc.n_ctx_train);
  }
  KVTIER_ASSIGN_OR_RETURN(const Prompt p, MakePrompt(lm, c, n + c.new_tokens));
  const std::span<const int32_t> prompt(p.tokens.data(), n);
  const std::span<const int32_t> longer(p.tokens.data(), n + c.new_tokens);
  ThreadPool threads(c.threads);
  KVTIER_ASSIGN_OR_RETURN(auto pool, MakeKvPool(mc, "--kv-type", c.kv_type, n + c.new_tokens + 64, 2));
  BenchSsdTtft r;
  r.model_name = mc.name;
  r.arch = std::string(ModelArchName(mc.arch));
  r.kv_type = active.name;
  r.prompt_source = p.source;
  r.prompt_tokens = n;
  r.new_tokens = c.new_tokens;
  r.threads = threads.num_threads();
  r.repeats = c.repeats;
  r.cold_repeats = c.cold_repeats;

  // Cold: no cache at all.
  SequenceCache cold;
  std::vector<double> cold_ms;
  for (int rep = 0; rep < c.cold_repeats; ++rep) {
    cold = SequenceCache();
    KVTIER_ASSIGN_OR_RETURN(engine::PrefillOutcome o,
                            engine::Prefill(m, nullptr, pool, prompt, c.ubatch, &threads));
    cold_ms.push_back(o.fetch_ms + o.compute_ms);
    cold = std::move(o.sequence);
  }
  r.cold_ms = Median(cold_ms);
  r.kv_bytes = cold.bytes();
  if (step) step();

  // Store the cold sequence (the request's copy released) and evict it all to a fresh tier.
  const std::string dir = root + "/ttft";
  const uint64_t budget = (uint64_t(n + c.new_tokens) / pool->block_tokens() + 8) *
                          pool->layout().block_stride;
  auto make_cache = [&](const std::shared_ptr<SsdTier>& tier) {
    PrefixCacheOptions o;
    o.memory_budget_bytes = budget;
    o.lower_tier = tier;
    return PrefixCache::Create(std::move(o));
  };
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<SsdTier> tier, OpenBenchTier(dir, c));
  {
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<PrefixCache> cache, make_cache(tier));
    KVTIER_RETURN_IF_ERROR(cache->Store(m.fingerprint(), prompt, std::move(cold)).status());
    Timer t;
    cache->Evict(UINT64_MAX);
    tier->Flush();
    r.spill_ms = t.Millis();
  }
  r.spilled_blocks = tier->Stats().spilled_blocks;
  r.spilled_bytes = tier->Stats().spilled_bytes;
  if (r.spilled_blocks == 0) return Status::Internal("bench-ssd: nothing was spilled");

  for (const bool restart : {false, true}) {
    for (int cold_pages = 0; cold_pages < (c.cold ? 2 : 1); ++cold_pages) {
      for (const bool exact : {true, false}) {
        const std::span<const int32_t> request = exact ? prompt : longer;
        BenchSsdTtftRow w;
        w.scenario = restart ? "after restart" : "warm process";
        w.page_cache = cold_pages ? "cold" : "warm";
        w.hit = exact ? "exact" : "prefix";
        w.request_tokens = static_cast<uint32_t>(request.size());
        std::vector<double> total, fetch, compute, open;
        for (int rep = 0; rep < c.repeats; ++rep) {
          if (cold_pages) DropPageCache(dir);
          if (restart) {
            tier.reset();
            Timer to;
            KVTIER_ASSIGN_OR_RETURN(tier, OpenBenchTier(dir, c));
            open.push_back(to.Millis());
          }
          KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<PrefixCache> cache, make_cache(tier));
          const uint64_t before = tier->Stats().loaded_bytes;
          KVTIER_ASSIGN_OR_RETURN(engine::PrefillOutcome o,
                                  engine::Prefill(m, cache.get(), pool, request, c.ubatch, &threads));
          if (o.reused_tokens + 1 < n) {
            return Status::Internal("bench-ssd: the SSD tier served " +
                                    std::to_string(o.reused_tokens) + " of " + std::to_string(n) +
                                    " prompt tokens (" + w.scenario + ", " + w.hit + ")");
          }
          total.push_back(o.fetch_ms + o.compute_ms);
          fetch.push_back(o.fetch_ms);
          compute.push_back(o.compute_ms);
          w.kind = std::string(PrefixMatchKindName(o.kind));
          w.reused_tokens = o.reused_tokens;
          w.bytes_read = tier->Stats().loaded_bytes - before;
        }  // the request's sequence and the cache go before the next repeat
        w.ttft_ms = Median(total);
        w.fetch_ms = Median(fetch);
        w.compute_ms = Median(compute);
        w.open_ms = open.empty() ? 0.0 : Median(open);
        w.speedup = w.ttft_ms > 0 ? r.cold_ms / w.ttft_ms : 0.0;
        w.read_gbps = w.fetch_ms > 0 ? double(w.bytes_read) / (w.fetch_ms * 1e6) : 0.0;
        r.rows.push_back(std::move(w));
        if (step) step();
      }
    }
  }
  return r;
}

}  // namespace kvtier::cli::ssd_bench
