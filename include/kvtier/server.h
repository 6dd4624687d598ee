// Module server (src/server, kvtier_server; order and include rule: docs/architecture.md) owns the
// OpenAI-compatible HTTP server and its metrics.
//
// The OpenAI-compatible HTTP server: /v1/chat/completions and /v1/completions (JSON or SSE
// streams ending in [DONE]), /v1/models, /health, /metrics (Prometheus text),
// GET /v1/cache/stats and DELETE /v1/cache, and the status page at / (server/dashboard.h). It turns requests into engine requests (chat
// template, tokenizer, stop strings, context checks) and engine events into responses.
//
// Ownership: the server borrows the model, tokenizer, engine, pool and caches given in
// ServerDeps; they must outlive it. Thread safety: Listen blocks the calling thread, which runs
// the event loop (server/http_front.h: every socket, /health and /metrics); each completion
// and cache request runs on a worker thread of its own; Shutdown may be called from any
// thread (e.g. a signal watcher).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kvtier/block_pool.h"
#include "kvtier/engine.h"
#include "kvtier/model.h"
#include "kvtier/prefix_cache.h"
#include "kvtier/remote_tier.h"
#include "kvtier/ssd_tier.h"
#include "kvtier/status.h"
#include "kvtier/tokenizer.h"

namespace kvtier {

struct ServerDeps {
  const Model* model = nullptr;          // required
  const Tokenizer* tokenizer = nullptr;  // required
  Engine* engine = nullptr;              // required
  std::shared_ptr<BlockPool> pool;       // the engine's pool (stats)
  PrefixCache* prefix_cache = nullptr;   // optional (stats, DELETE /v1/cache)
  SsdTier* ssd = nullptr;                // optional (stats, DELETE /v1/cache)
  RemoteTier* remote = nullptr;          // optional (stats, /metrics; DELETE /v1/cache leaves
                                         // the shared tier alone: other replicas use it)
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;                 // 0: any free port (see Server::port)
  std::string model_id;                 // the name in /v1/models and responses (required)
  uint32_t max_context = 0;             // prompt + completion tokens (0: the model's n_ctx_train)
  uint64_t max_body_bytes = 16ull << 20;  // larger bodies get 413
  uint32_t http_threads = 128;          // kept for compatibility (must be > 0): connections no
                                        // longer hold threads (see the limits below)
  uint32_t max_in_flight = 512;         // requests being served at once; 503 beyond
  // Connection limits (issue 36; docs/server-limits.md). Excess connections get 503 at once.
  uint32_t max_connections = 4096;
  uint32_t max_connections_per_client = 256;  // per remote address
  uint32_t header_timeout_ms = 10000;   // a whole request head, from its first byte (408)
  uint32_t idle_timeout_ms = 5000;      // keep-alive wait for the next request
  uint32_t body_min_bytes_per_s = 4096; // after header_timeout_ms of grace (408)
  // Bodies in memory: each request reserves 3x its Content-Length from this budget while it
  // is read and served; one that does not fit gets 503 before its body is read.
  uint64_t body_budget_bytes = 96ull << 20;
  // The SSD tier's figures count only what is on disk (issue 36): /v1/cache/stats checks every
  // indexed file first (one stat each, on its worker thread: 1.6-3.7 us a file measured, 9-24
  // ms for 5,276); /metrics, on the event loop, never walks the disk: a scrape asks a writer thread
  // for a walk when the last one is older than this, so the gauges lag the disk by at most
  // this plus a scrape interval.
  uint32_t metrics_ssd_reconcile_ms = 10000;
  // The status page (issue 37): GET / and GET /dashboard.json; false: both 404
  // (--no-dashboard). show_text lists the hottest prefixes' prompt text (--dashboard-show-text).
  bool dashboard = true;
  bool dashboard_show_text = false;
  // A Jinja chat template used instead of the GGUF's tokenizer.chat_template ("": the GGUF's;
  // --chat-template-file), e.g. a tool-capable one for a model whose template has no tools.
  std::string chat_template;
  // One line per request and per cache decision (the engine's log lines come here too when
  // the caller routes them). Called from HTTP threads; must be thread-safe.
  std::function<void(const std::string&)> log;
};

class Server {
 public:
  static Result<std::unique_ptr<Server>> Create(ServerDeps deps, ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the address (the port is known afterwards). IOError naming host:port on failure.
  Status Bind();
  uint16_t port() const;
  // Serves until Shutdown. Requires Bind.
  Status Listen();
  // Refuses new requests (503), waits up to `drain_ms` for the ones in flight to finish, then
  // makes Listen return. Requests still running then are cancelled by their disconnect.
  void Shutdown(uint32_t drain_ms = 60000);

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtier
