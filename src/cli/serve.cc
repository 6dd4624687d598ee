// `kvtier serve` (cli/serve.h): wires model, pool, prefix cache, SSD tier, engine and server,
// and the signal watcher that drains them.
#include "cli/serve.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "cli/cuda_step.h"
#include "cli/flags.h"
#include "cli/model_session.h"
#include "cli/sequence_runner.h"
#include "kvtier/engine.h"
#include "kvtier/env.h"
#include "kvtier/prefix_cache.h"
#include "kvtier/remote_tier.h"
#include "kvtier/server.h"
#include "kvtier/weights.h"
#include "kvtier/ssd_tier.h"

namespace kvtier::cli {
namespace {

// Log lines on stderr with a UTC timestamp; thread-safe.
void LogLine(const std::string& line) {
  static std::mutex mu;
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "%s.%03dZ %s\n", stamp, ms, line.c_str());
}

Status CheckConfig(const ServeConfig& c) {
  KVTIER_RETURN_IF_ERROR(CheckRange("--max-num-seqs", c.max_num_seqs, 1, 4096));
  KVTIER_RETURN_IF_ERROR(CheckRange("--prefill-step-size", c.prefill_step, 1, 65536));
  KVTIER_RETURN_IF_ERROR(CheckRange("--block-tokens", c.block_tokens, 1, 4096));
  KVTIER_RETURN_IF_ERROR(CheckRange("--max-body-mb", static_cast<long long>(c.max_body_mb), 1,
                                    4096));
  KVTIER_RETURN_IF_ERROR(CheckRange("--max-connections", c.max_connections, 1, 1000000));
  KVTIER_RETURN_IF_ERROR(CheckRange("--max-connections-per-client",
                                    c.max_connections_per_client, 1, 1000000));
  KVTIER_RETURN_IF_ERROR(CheckRange("--header-timeout-ms", c.header_timeout_ms, 1, 3600000));
  KVTIER_RETURN_IF_ERROR(CheckRange("--idle-timeout-ms", c.idle_timeout_ms, 1, 3600000));
  KVTIER_RETURN_IF_ERROR(CheckRange("--body-min-rate", c.body_min_rate, 0, 1u << 30));
  KVTIER_RETURN_IF_ERROR(CheckRange("--body-budget-mb", static_cast<long long>(c.body_budget_mb),
                                    1, 1 << 20));
  if (c.cache_memory_mb > 0 && c.cache_memory_percent > 0) {
    return Status::InvalidArgument(
        "--cache-memory-mb and --cache-memory-percent: give one of them, got both");
  }
  if (c.cache_memory_percent < 0 || c.cache_memory_percent > 100) {
    return Status::InvalidArgument("--cache-memory-percent: expected 0..100, got " +
                                   std::to_string(c.cache_memory_percent));
  }
  if (!(c.ssd_cache_max_gb > 0) || c.ssd_cache_max_gb > 1e6) {
    return Status::InvalidArgument("--ssd-cache-max-gb: expected more than 0, got " +
                                   std::to_string(c.ssd_cache_max_gb));
  }
  return Status::OK();
}

// A --kv-store-type pair serve can use: V per token (token-grouped formats are K only), and
// token-grouped K in whole groups of a block.
Status CheckStorePair(const KvFormats& kv, uint32_t block_tokens) {
  if (kv.v.is_token_grouped()) {
    return Status::InvalidArgument("--kv-store-type: V format " + kv.v.name() +
                                   " is token-grouped, K only: give a K/V pair, e.g. " +
                                   kv.k.name() + "/rot4s0");
  }
  if (kv.k.is_token_grouped() && block_tokens % kv.k.group != 0) {
    return Status::InvalidArgument("--kv-store-type: K format " + kv.k.name() + " needs --block-tokens a multiple of " +
                                   std::to_string(kv.k.group) + ", got " + std::to_string(block_tokens));
  }
  return Status::OK();
}

// The store formats as --kv-store-type spells them: K, or K/V where they differ.
std::string StoreName(const PrefixCacheOptions& o) {
  if (!o.store_format) return "active";
  const Format v = o.store_v_format.value_or(*o.store_format);
  return v == *o.store_format ? o.store_format->name() : o.store_format->name() + "/" + v.name();
}

}  // namespace

Status RunServe(const ServeConfig& c) {
  KVTIER_RETURN_IF_ERROR(CheckConfig(c));
  KVTIER_RETURN_IF_ERROR(CheckDevice(c.device));
  // Every thread started from here on inherits the mask; the watcher takes the signals.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const std::string path = c.model.empty() ? DefaultModelPath() : c.model;
  KVTIER_ASSIGN_OR_RETURN(LoadedModel m, LoadModel(path));
  LogLine("weights file=" + path + " " + DescribeTensorTypes(m.model->gguf()));
  const ModelConfig& mc = m.model->config();
  const uint32_t context = c.max_model_len > 0 ? c.max_model_len
                                               : (mc.n_ctx_train > 0 ? mc.n_ctx_train : 2048);

  // The active pool: --kv-pool-mb, or room for max-num-seqs full contexts twice over (the
  // prefix cache keeps unquantized entries in this pool and gives blocks back on demand),
  // capped at a quarter of RAM (a long-context model's full contexts may not fit).
  KVTIER_ASSIGN_OR_RETURN(const KvFormats kv, ParseKvFormats("--kv-type/--kv-cache-dtype", c.kv_type));
  // Of prefix-cache entries, K and V (K or K/V, as --kv-type); none: the active formats.
  std::optional<Format> store_format, store_v_format;
  if (c.kv_store_type != "active") {
    Result<KvFormats> store = ParseKvFormats("--kv-store-type", c.kv_store_type);
    if (!store.ok()) {
      return Status::InvalidArgument(store.status().message() +
                                     " (or 'active': the active formats)");
    }
    KVTIER_RETURN_IF_ERROR(CheckStorePair(*store, c.block_tokens));
    store_format = store->k;
    if (store->v != store->k) store_v_format = store->v;
  }
  KVTIER_ASSIGN_OR_RETURN(const KvBlockLayout layout,
                          KvBlockLayout::Make(mc.kv_shape(), kv.k, kv.v, c.block_tokens,
                                              mc.layer_windows()));
  BlockPoolOptions pool_options;
  pool_options.shape = mc.kv_shape();
  pool_options.k_format = kv.k;
  pool_options.v_format = kv.v;
  pool_options.block_tokens = c.block_tokens;
  pool_options.layer_window = mc.layer_windows();  // window layers in their own pages
  pool_options.capacity_bytes = c.kv_pool_mb << 20;
  if (c.kv_pool_mb == 0) {
    const uint64_t blocks_per_row = (uint64_t{context} + c.block_tokens - 1) / c.block_tokens + 1;
    pool_options.capacity_bytes = blocks_per_row * 2 * c.max_num_seqs * layout.block_stride;
    const long pages = sysconf(_SC_PHYS_PAGES), page_bytes = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page_bytes > 0) {
      const uint64_t ram = static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_bytes);
      pool_options.capacity_bytes = std::min(pool_options.capacity_bytes, ram / 4);
    }
  } else if (pool_options.capacity_bytes < layout.block_stride) {
    return Status::InvalidArgument("--kv-pool-mb: " + std::to_string(c.kv_pool_mb) +
                                   " MB is less than one KV block (" +
                                   std::to_string(layout.block_stride) + " bytes)");
  }
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<BlockPool> pool, BlockPool::Create(pool_options));

  std::shared_ptr<SsdTier> ssd;
  if (!c.ssd_cache_dir.empty()) {
    SsdTierOptions so;
    so.dir = c.ssd_cache_dir;
    so.max_bytes = static_cast<uint64_t>(std::llround(c.ssd_cache_max_gb * double(1ull << 30)));
    KVTIER_ASSIGN_OR_RETURN(ssd, SsdTier::Open(so));
    const SsdTierStats ss = ssd->Stats();
    LogLine("ssd_tier dir=" + c.ssd_cache_dir + " blocks=" + std::to_string(ss.blocks) +
            " bytes=" + std::to_string(ss.bytes) + " max_bytes=" + std::to_string(ss.max_bytes) +
            " removed_tmp=" + std::to_string(ss.removed_tmp_files));
  }
  std::shared_ptr<RemoteTier> remote;
  if (!c.remote_cache.empty()) {
    RemoteTierOptions ro;
    ro.url = c.remote_cache;
    ro.ttl_s = c.remote_cache_ttl_s;
    ro.connections_per_node = std::max<uint32_t>(8, c.max_num_seqs + 4);
    KVTIER_ASSIGN_OR_RETURN(remote, RemoteTier::Open(ro));
    LogLine("remote_tier url=" + c.remote_cache +
            " ttl_s=" + std::to_string(c.remote_cache_ttl_s) +
            " deadline_ms=" + std::to_string(ro.deadline_ms));
  }
  std::shared_ptr<LowerTier> lower;
  if (ssd != nullptr && remote != nullptr) {
    lower = std::make_shared<TierStack>(std::vector<std::shared_ptr<LowerTier>>{ssd, remote});
  } else if (ssd != nullptr) {
    lower = ssd;
  } else {
    lower = remote;
  }
  std::unique_ptr<PrefixCache> cache;
  if (!c.disable_prefix_cache) {
    PrefixCacheOptions po;
    const double percent =
        c.cache_memory_mb == 0 && c.cache_memory_percent == 0 ? 10.0 : c.cache_memory_percent;
    KVTIER_ASSIGN_OR_RETURN(po.memory_budget_bytes,
                            PrefixCacheBudgetBytes(c.cache_memory_mb, percent));
    if (c.kv_cache_quantization) {
      KVTIER_ASSIGN_OR_RETURN(po.store_format,
                              PrefixStoreFormat(c.kv_quantization_bits, c.kv_quantization_group));
    } else {
      po.store_format = store_format;
      po.store_v_format = store_v_format;
    }
    po.min_quantize_tokens = c.min_quantize_tokens;
    KVTIER_ASSIGN_OR_RETURN(po.state_type, ParseStateType(c.state_type));
    po.lower_tier = lower;
    // A shared tier is only shared when entries reach it when stored, not when evicted.
    if (remote != nullptr) po.write_policy = CacheWritePolicy::kWriteThrough;
    if (!c.cache_write_policy.empty()) {
      KVTIER_ASSIGN_OR_RETURN(po.write_policy, ParseCacheWritePolicy(c.cache_write_policy));
    }
    KVTIER_ASSIGN_OR_RETURN(cache, PrefixCache::Create(po));
  } else if (lower != nullptr) {
    return Status::InvalidArgument(
        std::string(ssd != nullptr ? "--ssd-cache-dir" : "--remote-cache") +
        ": the lower tiers sit below the prefix cache; they cannot be used with "
        "--disable-prefix-cache");
  } else if (!c.cache_write_policy.empty()) {
    return Status::InvalidArgument("--cache-write-policy needs the prefix cache");
  }

  // --device cuda: the engine's steps on the GPU, its pool mirrored there (cli/cuda_step.h).
  std::unique_ptr<StepBackend> backend;
  if (c.device != "cpu") {
    KVTIER_ASSIGN_OR_RETURN(backend, OpenCudaStep(c.device, *m.model, pool,
                                                  std::max({c.prefill_step, c.max_num_seqs,
                                                            1024u})));
    LogLine("device=" + backend->name());
  }
  EngineOptions eo;
  eo.backend = backend.get();
  eo.pool = pool;
  eo.prefix_cache = cache.get();
  eo.max_num_seqs = c.max_num_seqs;
  eo.prefill_step = c.prefill_step;
  eo.threads = c.threads;
  eo.log = LogLine;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(*m.model, eo));

  ServerDeps deps;
  deps.model = m.model.get();
  deps.tokenizer = m.tokenizer.get();
  deps.engine = engine.get();
  deps.pool = pool;
  deps.prefix_cache = cache.get();
  deps.ssd = ssd.get();
  deps.remote = remote.get();
  ServerOptions so;
  so.host = c.host;
  so.port = c.port;
  so.model_id = std::filesystem::path(path).stem().string();
  so.max_context = context;
  so.max_body_bytes = c.max_body_mb << 20;
  so.max_connections = c.max_connections;
  so.max_connections_per_client = c.max_connections_per_client;
  so.header_timeout_ms = c.header_timeout_ms;
  so.idle_timeout_ms = c.idle_timeout_ms;
  so.body_min_bytes_per_s = c.body_min_rate;
  so.body_budget_bytes = c.body_budget_mb << 20;
  so.dashboard = !c.no_dashboard;
  so.dashboard_show_text = c.dashboard_show_text;
  if (!c.chat_template_file.empty()) {
    Result<std::vector<uint8_t>> t = Env::Default()->ReadFile(c.chat_template_file);
    if (!t.ok()) {
      return Status::InvalidArgument("--chat-template-file " + c.chat_template_file + ": " +
                                     t.status().message());
    }
    so.chat_template.assign(t->begin(), t->end());
    if (so.chat_template.empty()) {
      return Status::InvalidArgument("--chat-template-file " + c.chat_template_file +
                                     ": the file is empty");
    }
  }
  so.log = LogLine;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Server> server, Server::Create(deps, so));
  KVTIER_RETURN_IF_ERROR(server->Bind());

  std::atomic<bool> stopping{false};
  std::thread watcher([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (stopping.exchange(true)) return;  // Listen already ended (woken by RunServe)
    LogLine(std::string("received ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") +
            ": draining requests in flight");
    server->Shutdown(c.drain_seconds * 1000);
  });
  LogLine("model=" + so.model_id + " file=" + path + " context=" + std::to_string(context) +
          " kv_pool=" + pool->k_format().name() + "/" + pool->v_format().name() + " " +
          std::to_string(pool->capacity_blocks()) + " blocks x " +
          std::to_string(pool->block_tokens()) + " tokens (" +
          std::to_string(pool->layout().block_stride * pool->capacity_blocks()) + " bytes)" +
          " prefix_cache=" +
          (cache ? std::to_string(cache->options().memory_budget_bytes) + " bytes" +
                       (cache->options().store_format
                            ? " store=" + StoreName(cache->options()) + " (from " +
                                  std::to_string(cache->options().min_quantize_tokens) + " tokens)"
                            : std::string(" store=active"))
                 : std::string("off")) +
          " max_num_seqs=" + std::to_string(c.max_num_seqs) +
          (cache ? " write_policy=" +
                       std::string(CacheWritePolicyName(cache->options().write_policy))
                 : ""));
  std::printf("kvtier serve: listening on http://%s:%u model=%s\n", c.host.c_str(),
              static_cast<unsigned>(server->port()), so.model_id.c_str());
  std::fflush(stdout);
  Status listened = server->Listen();
  if (!stopping.exchange(true)) pthread_kill(watcher.native_handle(), SIGTERM);
  watcher.join();

  // Requests that outlived the drain are cancelled by the engine's destructor; their K/V goes
  // to the prefix cache like everything else, and from there to SSD.
  engine.reset();
  if (cache != nullptr && ssd != nullptr) {
    const uint64_t spilled = cache->Evict(UINT64_MAX);
    ssd->Flush();
    const SsdTierStats ss = ssd->Stats();
    LogLine("shutdown: spilled " + std::to_string(spilled) + " bytes of the RAM prefix cache; " +
            "ssd blocks=" + std::to_string(ss.blocks) + " bytes=" + std::to_string(ss.bytes));
  }
  if (remote != nullptr) {
    remote->Flush();
    const RemoteTierStats rs = remote->Stats();
    LogLine("shutdown: remote written_blocks=" + std::to_string(rs.written_blocks) +
            " hits=" + std::to_string(rs.hits) + " write_errors=" + std::to_string(rs.write_errors));
  }
  LogLine("stopped");
  return listened;
}

}  // namespace kvtier::cli
