// The CUDA step backend of `kvtier serve --device cuda`; see cuda_step.h.
#include "cli/cuda_step.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cli/sequence_runner.h"
#if KVTIER_HAVE_CUDA
#include "kvtier/cuda_model.h"
#endif

namespace kvtier::cli {

#if KVTIER_HAVE_CUDA
namespace {

class CudaStep : public StepBackend {
 public:
  CudaStep(std::shared_ptr<BlockPool> pool, std::unique_ptr<CudaModel> dm, uint32_t max_batch,
           size_t n_vocab)
      : pool_(std::move(pool)),
        dm_(std::move(dm)),
        max_batch_(max_batch),
        n_vocab_(n_vocab),
        dirty_(pool_->capacity_blocks(), 0) {}

  Status Forward(std::span<SequenceCache> rows, std::span<const std::span<const int32_t>> tokens,
                 float* logits, std::vector<Status>* row_status) override {
    const size_t V = n_vocab_;
    const uint32_t bt = pool_->block_tokens();
    const auto t0 = std::chrono::steady_clock::now();
    row_status->assign(rows.size(), Status::OK());
    // Calls of at most max_batch tokens; a row longer than what is left of a call goes on in
    // the next one (its pieces in order, each after the previous one's K/V).
    // Decode rows first, in calls of their own (the dequantizing matvec below gemm_min_tokens),
    // then the prompt chunks (cuBLAS).
    std::vector<size_t> order;
    for (size_t r = 0; r < rows.size(); ++r) {
      if (tokens[r].size() == 1) order.push_back(r);
    }
    const size_t n_decode = order.size();
    for (size_t r = 0; r < rows.size(); ++r) {
      if (tokens[r].size() != 1) order.push_back(r);
    }
    std::vector<uint32_t> done(rows.size(), 0);
    std::vector<CudaRow> call;
    std::vector<size_t> call_row;
    std::vector<float> out;
    size_t k = 0;
    while (k < order.size()) {
      call.clear();
      call_row.clear();
      uint32_t budget = max_batch_;
      const bool decode_call = k < n_decode;
      while (k < order.size() && budget > 0 && (k < n_decode) == decode_call) {
        const size_t i = order[k];
        const uint32_t n = static_cast<uint32_t>(tokens[i].size()) - done[i];
        const uint32_t take = std::min(n, budget);
        CudaRow r;
        r.blocks = rows[i].block_ids();
        r.length = rows[i].size() + done[i];
        r.tokens = tokens[i].subspan(done[i], take);
        call.push_back(r);
        call_row.push_back(i);
        done[i] += take;
        budget -= take;
        if (done[i] == tokens[i].size()) ++k;
      }
      out.resize(call.size() * V);
      std::vector<Status> st;
      KVTIER_RETURN_IF_ERROR(dm_->ForwardRows(call, out.data(), &st));
      for (size_t c = 0; c < call.size(); ++c) {
        const size_t row = call_row[c];
        if (!st[c].ok()) (*row_status)[row] = st[c];
        if (done[row] == tokens[row].size()) {  // the row's last piece: its logits
          std::memcpy(logits + row * V, out.data() + c * V, V * sizeof(float));
        }
      }
    }
    if (stats_) Account(t0, rows.size(), tokens);
    // The host sequences count the new tokens; their blocks are dirty on the device.
    const uint32_t layers = pool_->shape().n_layers;
    for (size_t r = 0; r < rows.size(); ++r) {
      const uint32_t first = rows[r].size();
      const uint32_t n = static_cast<uint32_t>(tokens[r].size());
      for (uint32_t l = 0; l < layers; ++l) {
        KVTIER_RETURN_IF_ERROR(rows[r].AppendExternal(l, n));
      }
      const auto ids = rows[r].block_ids();
      for (uint32_t b = first / bt; b < (first + n + bt - 1) / bt; ++b) dirty_[ids[b]] = 1;
    }
    return Status::OK();
  }

  Status SyncToHost(const SequenceCache& seq) override {
    const uint32_t bt = pool_->block_tokens();
    const auto ids = seq.block_ids();
    std::vector<BlockId> down;
    for (size_t b = 0; b < std::min<size_t>(ids.size(), (size_t{seq.size()} + bt - 1) / bt); ++b) {
      if (dirty_[ids[b]]) down.push_back(ids[b]);
    }
    if (down.empty()) return Status::OK();
    KVTIER_RETURN_IF_ERROR(dm_->CopyBlocksToHost(down, pool_->block_data(0)));
    for (BlockId b : down) dirty_[b] = 0;
    return Status::OK();
  }

  Status HostWritten(std::span<const BlockId> ids) override {
    KVTIER_RETURN_IF_ERROR(dm_->CopyBlocksFromHost(ids, pool_->block_data(0)));
    for (BlockId b : ids) dirty_[b] = 0;
    return Status::OK();
  }

  std::string name() const override {
    return "cuda (" + dm_->device() + "; host pool " + (pinned_ ? "pinned" : "pageable") + ")";
  }
  bool pinned_ = false;
  bool stats_ = false;  // KVTIER_CUDA_STEP_STATS=1: a line on stderr every 256 steps

 private:
  // Time in the device calls (forward, logits copy, checks) against the time between steps
  // (the engine's sampling, events, stores).
  void Account(std::chrono::steady_clock::time_point t0, size_t rows,
               std::span<const std::span<const int32_t>> tokens) {
    using ms = std::chrono::duration<double, std::milli>;
    const auto t1 = std::chrono::steady_clock::now();
    if (steps_ > 0) between_ms_ += ms(t0 - last_end_).count();
    forward_ms_ += ms(t1 - t0).count();
    last_end_ = t1;
    rows_ += rows;
    for (const auto& t : tokens) tokens_ += t.size();
    if (++steps_ % 256 == 0) {
      std::fprintf(stderr,
                   "cuda_step steps=%llu rows/step=%.1f tokens/step=%.1f forward_ms/step=%.2f "
                   "between_ms/step=%.2f\n",
                   static_cast<unsigned long long>(steps_), double(rows_) / 256,
                   double(tokens_) / 256, forward_ms_ / 256, between_ms_ / 256);
      rows_ = tokens_ = 0;
      forward_ms_ = between_ms_ = 0;
    }
  }
  uint64_t steps_ = 0, rows_ = 0, tokens_ = 0;
  double forward_ms_ = 0, between_ms_ = 0;
  std::chrono::steady_clock::time_point last_end_;

  std::shared_ptr<BlockPool> pool_;
  std::unique_ptr<CudaModel> dm_;
  uint32_t max_batch_;
  size_t n_vocab_;
  std::vector<uint8_t> dirty_;  // [capacity_blocks]: the device holds newer rows
};

}  // namespace
#endif

Result<std::unique_ptr<StepBackend>> OpenCudaStep(const std::string& device, const Model& m,
                                                  std::shared_ptr<BlockPool> pool,
                                                  uint32_t max_batch) {
  KVTIER_RETURN_IF_ERROR(CheckDevice(device));
  if (device != "cuda") {
    return Status::InvalidArgument("--device: the step backend is for cuda, got '" + device + "'");
  }
#if KVTIER_HAVE_CUDA
  const KvBlockLayout& host = pool->layout();
  KVTIER_ASSIGN_OR_RETURN(const KvBlockLayout dev,
                          KvBlockLayout::Make(host.shape, host.k_format, host.v_format,
                                              host.block_tokens));
  bool same = dev.block_stride == host.block_stride;
  for (uint32_t l = 0; same && l < host.shape.n_layers; ++l) {
    same = dev.k_offset(l) == host.k_offset(l) && dev.v_offset(l) == host.v_offset(l);
  }
  if (!same) {
    return Status::Unimplemented(
        "--device cuda: the host KV pool's block layout (" + host.ToString() +
        ") differs from the device pool's (" + dev.ToString() +
        "); sliding-window layers in their own pages do not run on the GPU yet");
  }
  CudaModelOptions o;
  o.k_format = host.k_format;
  o.v_format = host.v_format;
  o.block_tokens = host.block_tokens;
  o.pool_blocks = pool->capacity_blocks();
  o.max_tokens = SequenceCache::kMaxTokens;
  o.max_batch = max_batch;
  const char* graphs = std::getenv("KVTIER_CUDA_GRAPHS");
  o.graphs = graphs == nullptr || std::string(graphs) != "0";
  // KVTIER_CUDA_NAN_TOKEN=id: fault injection (that token's row fails; serve_device_run.sh).
  if (const char* nan = std::getenv("KVTIER_CUDA_NAN_TOKEN"); nan != nullptr && *nan != 0) {
    o.nan_token = static_cast<int32_t>(std::strtol(nan, nullptr, 10));
  }
  // Decode steps of up to 63 rows through the matvec (8 tokens per pass over the weights);
  // KVTIER_CUDA_GEMM_MIN=n: from n tokens per call through cuBLAS instead.
  o.gemm_min_tokens = 64;
  if (const char* g = std::getenv("KVTIER_CUDA_GEMM_MIN"); g != nullptr && *g != 0) {
    o.gemm_min_tokens = static_cast<uint32_t>(std::strtoul(g, nullptr, 10));
  }
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<CudaModel> dm, CudaModel::Create(m, o));
  // The host pool page-locked for the block copies (KVTIER_CUDA_PIN_HOST=0: pageable).
  const char* pin = std::getenv("KVTIER_CUDA_PIN_HOST");
  const bool want_pin = pin == nullptr || std::string(pin) != "0";
  const bool pinned =
      want_pin && dm->PinHost(pool->block_data(0), size_t{pool->capacity_blocks()} *
                                                       pool->layout().block_stride)
                      .ok();
  auto s = std::make_unique<CudaStep>(std::move(pool), std::move(dm), max_batch,
                                      m.config().n_vocab);
  s->pinned_ = pinned;
  const char* st = std::getenv("KVTIER_CUDA_STEP_STATS");
  s->stats_ = st != nullptr && std::string(st) == "1";
  return std::unique_ptr<StepBackend>(std::move(s));
#else
  (void)m;
  (void)pool;
  (void)max_batch;
  return Status::Unimplemented("--device cuda: unreachable without the CUDA backend");
#endif
}

}  // namespace kvtier::cli
