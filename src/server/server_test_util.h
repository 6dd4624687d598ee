// Test-only: a Server in process on a free loopback port, listening on its own thread, with
// cpp-httplib clients to it; the fixture src/server's tests share.
// - ServerThread: the engine, the server and its listener thread over borrowed parts.
// - BundledServer: the bundled model over its own pool, optionally a RAM prefix cache and an
//   SSD tier below it.
// - ModelFileServer: the model of a GGUF file (e.g. a test model with a planted tensor or
//   template) over a pool of 16-token blocks (64 unless told).
// Ownership: ServerThread owns the engine, the server and the listener; the model, tokenizer,
// pool, prefix cache and tier of its ServerDeps must outlive it (BundledServer and
// ModelFileServer own theirs in a base constructed before and destroyed after it).
// Thread safety: Client / Post / Get / GetJson each use a client of their own and may be called
// from any thread while the server runs; Stop from one thread at a time.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>

#include "engine/engine_test_util.h"
#include "kvtier/engine.h"
#include "kvtier/gguf.h"
#include "kvtier/model.h"
#include "kvtier/prefix_cache.h"
#include "kvtier/server.h"
#include "kvtier/ssd_tier.h"
#include "kvtier/tokenizer.h"

namespace kvtier::testing {

// Engine options of every server test: two compute threads (the machine is shared).
inline EngineOptions TestEngineOptions(uint32_t max_num_seqs = 8) {
  EngineOptions eo;
  eo.max_num_seqs = max_num_seqs;
  eo.threads = 2;
  return eo;
}

class ServerThread {
 public:
  // The engine over *deps.model with `eo` (its pool and prefix cache: those of `deps`), the
  // server over `deps` (engine filled in) with `so` on a free port (so.port is set to 0),
  // bound, and listening on its own thread.
  ServerThread(ServerDeps deps, EngineOptions eo, ServerOptions so, int read_timeout_s = 120)
      : read_timeout_s_(read_timeout_s) {
    eo.pool = deps.pool;
    eo.prefix_cache = deps.prefix_cache;
    engine = Engine::Create(*deps.model, eo).value();
    deps.engine = engine.get();
    so.port = 0;
    server = Server::Create(deps, so).value();
    EXPECT_TRUE(server->Bind().ok());
    port = server->port();
    listener = std::thread([this] { EXPECT_TRUE(server->Listen().ok()); });
  }
  ServerThread(const ServerThread&) = delete;
  ServerThread& operator=(const ServerThread&) = delete;
  ~ServerThread() { Stop(10000); }

  // Shutdown with `drain_ms` for requests in flight, and the listener joined (once; a second
  // call does nothing).
  void Stop(uint32_t drain_ms) {
    if (!listener.joinable()) return;
    server->Shutdown(drain_ms);
    listener.join();
  }

  httplib::Client Client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(read_timeout_s_);
    return c;
  }
  httplib::Result Post(const std::string& path, const std::string& body) const {
    return Client().Post(path, body, "application/json");
  }
  httplib::Result PostJson(const std::string& path, const nlohmann::json& body) const {
    return Post(path, body.dump());
  }
  httplib::Result Get(const std::string& path) const { return Client().Get(path); }
  // The greedy completion of `prompt` through /v1/completions, expecting 200: the answer's
  // JSON (null JSON if there was no answer).
  nlohmann::json CompleteJson(const std::string& prompt, int max_tokens) const {
    const nlohmann::json body{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
    httplib::Result r = Post("/v1/completions", body.dump());
    EXPECT_TRUE(r);
    if (!r) return nlohmann::json();
    EXPECT_EQ(r->status, 200) << r->body;
    return nlohmann::json::parse(r->body);
  }
  // The JSON body of GET `path`, expecting 200 (null JSON if there was no answer).
  nlohmann::json GetJson(const std::string& path) const {
    httplib::Result r = Get(path);
    EXPECT_TRUE(r);
    if (!r) return nlohmann::json();
    EXPECT_EQ(r->status, 200) << path << ": " << r->body;
    return nlohmann::json::parse(r->body);
  }

  std::unique_ptr<Engine> engine;
  std::unique_ptr<Server> server;
  uint16_t port = 0;
  std::thread listener;

 private:
  int read_timeout_s_;
};

// ---- The bundled model ------------------------------------------------------------------

struct BundledServerOptions {
  uint64_t pool_blocks = 512;  // of 16 tokens
  std::shared_ptr<BlockPool> pool;  // used instead of pool_blocks when set
  uint64_t prefix_cache_bytes = 0;  // a RAM prefix cache of this budget (0: none)
  std::string ssd_dir;  // an SSD tier there, the prefix cache's lower tier (empty: none)
  EngineOptions engine = TestEngineOptions();
  ServerOptions server;  // port 0 and model_id "bundled" are filled in
  int read_timeout_s = 120;
};

// The parts a BundledServer serves, built before its engine and released after it.
struct BundledParts {
  explicit BundledParts(const BundledServerOptions& o) {
    pool = o.pool != nullptr ? o.pool : BundledPool(o.pool_blocks);
    if (!o.ssd_dir.empty()) {
      SsdTierOptions to;
      to.dir = o.ssd_dir;
      to.log = false;
      to.writer_threads = 1;
      tier = SsdTier::Open(to).value();
    }
    if (o.prefix_cache_bytes > 0) {
      PrefixCacheOptions po;
      po.memory_budget_bytes = o.prefix_cache_bytes;
      po.lower_tier = tier;
      cache = PrefixCache::Create(po).value();
    }
  }
  ServerDeps Deps() const {
    ServerDeps d;
    d.model = Bundled().model.get();
    d.tokenizer = Bundled().tokenizer.get();
    d.pool = pool;
    d.prefix_cache = cache.get();
    d.ssd = tier.get();
    return d;
  }
  static ServerOptions Named(ServerOptions so) {
    so.model_id = "bundled";
    return so;
  }

  std::shared_ptr<BlockPool> pool;
  std::shared_ptr<SsdTier> tier;
  std::unique_ptr<PrefixCache> cache;
};

struct BundledServer : BundledParts, ServerThread {
  explicit BundledServer(const BundledServerOptions& o = {})
      : BundledParts(o),
        ServerThread(Deps(), o.engine, Named(o.server), o.read_timeout_s) {}

  // No K/V held but the prefix cache's (polled for up to 20 s).
  bool NoActiveKv() const {
    for (int i = 0; i < 400; ++i) {
      if (engine->Stats().running == 0 &&
          pool->Stats().owner_bytes[static_cast<int>(KvOwner::kActive)] == 0) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
};

// ---- A model file -----------------------------------------------------------------------

// The model, tokenizer and a pool of `pool_blocks` blocks of 16 tokens (f16) of the GGUF file
// at `path`.
struct ModelFileParts {
  explicit ModelFileParts(const std::string& path, uint64_t pool_blocks = 64) {
    file = GgufFile::Open(path).value();
    model = Model::FromGguf(file).value();
    tokenizer = Tokenizer::FromGguf(*file).value();
    BlockPoolOptions po;
    po.shape = model->config().kv_shape();
    po.block_tokens = 16;
    po.capacity_bytes =
        pool_blocks * KvBlockLayout::Make(po.shape, po.k_format, po.v_format, 16)->block_stride;
    pool = BlockPool::Create(po).value();
  }
  ServerDeps Deps() const {
    ServerDeps d;
    d.model = model.get();
    d.tokenizer = tokenizer.get();
    d.pool = pool;
    return d;
  }
  static ServerOptions Named(ServerOptions so, std::string model_id) {
    so.model_id = std::move(model_id);
    return so;
  }

  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<BlockPool> pool;
};

struct ModelFileServerOptions {
  uint64_t pool_blocks = 64;  // of 16 tokens
  ServerOptions server;       // port 0 and the model id are filled in
  int read_timeout_s = 60;    // the clients'
};

// The model at `path` served as `model_id`, no prefix cache; by default over 64 blocks, clients
// waiting 60 s.
struct ModelFileServer : ModelFileParts, ServerThread {
  ModelFileServer(const std::string& path, std::string model_id,
                  const ModelFileServerOptions& o = {})
      : ModelFileParts(path, o.pool_blocks),
        ServerThread(Deps(), TestEngineOptions(), Named(o.server, std::move(model_id)),
                     o.read_timeout_s) {}
};

}  // namespace kvtier::testing
