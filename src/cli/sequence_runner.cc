// The CPU and CUDA sequence runners; see sequence_runner.h.
#include "cli/sequence_runner.h"

#include <cstdlib>
#include <vector>

#include "cli/flags.h"
#include "cli/model_session.h"
#include "kvtier/batch_cache.h"
#if KVTIER_HAVE_CUDA
#include "kvtier/cuda_model.h"
#endif

namespace kvtier::cli {
namespace {

class CpuRunner : public SequenceRunner {
 public:
  CpuRunner(const Model& m, std::shared_ptr<BlockPool> pool, ThreadPool* threads)
      : m_(m), pool_(std::move(pool)), threads_(threads) {}

  Status Forward(std::span<const int32_t> tokens, bool all, float* logits) override {
    std::span<const int32_t> rows[1] = {tokens};
    if (m_.state_format() != 0) {
      HybridSeqState* states[1] = {&state_};
      return m_.Forward(*cache_, rows, all, logits, threads_, states);
    }
    return m_.Forward(*cache_, rows, all, logits, threads_);
  }
  Status Reset() override {
    cache_.reset();  // its blocks back to the pool first
    cache_ = std::make_unique<BatchCache>(pool_);
    state_ = HybridSeqState();
    return cache_->Add(SequenceCache(pool_));
  }
  std::string k_format() const override { return pool_->layout().k_format.name(); }
  std::string v_format() const override { return pool_->layout().v_format.name(); }
  std::string device() const override { return "cpu"; }

 private:
  const Model& m_;
  std::shared_ptr<BlockPool> pool_;
  ThreadPool* threads_;
  std::unique_ptr<BatchCache> cache_;
  HybridSeqState state_;
};

#if KVTIER_HAVE_CUDA
class CudaRunner : public SequenceRunner {
 public:
  CudaRunner(std::unique_ptr<CudaModel> dm, Format k, Format v)
      : dm_(std::move(dm)), k_(k), v_(v) {}
  Status Forward(std::span<const int32_t> tokens, bool all, float* logits) override {
    return dm_->Forward(tokens, all, logits);
  }
  Status Reset() override {
    dm_->Reset();
    return Status::OK();
  }
  std::string k_format() const override { return k_.name(); }
  std::string v_format() const override { return v_.name(); }
  std::string device() const override { return dm_->device(); }

 private:
  std::unique_ptr<CudaModel> dm_;
  Format k_, v_;
};
#endif

}  // namespace

bool CudaBackendBuilt() {
#if KVTIER_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

Status CheckDevice(const std::string& device) {
  if (device == "cpu") return Status::OK();
  if (device == "cuda") {
#if KVTIER_HAVE_CUDA
    return Status::OK();
#else
    return Status::Unimplemented(
        "--device cuda: this kvtier was built without the CUDA backend (configure with "
        "-DKVTIER_CUDA=ON on a machine with nvcc)");
#endif
  }
  return Status::InvalidArgument("--device: expected cpu or cuda, got '" + device + "'");
}

Result<std::unique_ptr<SequenceRunner>> OpenRunner(const std::string& device, const Model& m,
                                                   const std::string& flag,
                                                   const std::string& kv_type,
                                                   uint32_t max_tokens, uint32_t max_batch,
                                                   ThreadPool* threads) {
  KVTIER_RETURN_IF_ERROR(CheckDevice(device));
  std::unique_ptr<SequenceRunner> r;
  if (device == "cpu") {
    KVTIER_ASSIGN_OR_RETURN(auto pool, MakeKvPool(m.config(), flag, kv_type, max_tokens));
    r = std::make_unique<CpuRunner>(m, std::move(pool), threads);
  } else {
#if KVTIER_HAVE_CUDA
    KVTIER_ASSIGN_OR_RETURN(const KvFormats kv, ParseKvFormats(flag, kv_type));
    CudaModelOptions o;
    o.k_format = kv.k;
    o.v_format = kv.v;
    o.max_tokens = max_tokens;
    o.max_batch = max_batch;
    // KVTIER_CUDA_GRAPHS=0: plain launches for one-token steps (for comparisons).
    const char* graphs = std::getenv("KVTIER_CUDA_GRAPHS");
    o.graphs = graphs == nullptr || std::string(graphs) != "0";
    // KVTIER_CUDA_GEMM_MIN=n: calls of n tokens and more through cuBLAS (comparisons).
    if (const char* g = std::getenv("KVTIER_CUDA_GEMM_MIN"); g != nullptr && *g != 0) {
      o.gemm_min_tokens = static_cast<uint32_t>(std::strtoul(g, nullptr, 10));
    }
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<CudaModel> dm, CudaModel::Create(m, o));
    r = std::make_unique<CudaRunner>(std::move(dm), kv.k, kv.v);
#else
    (void)max_batch;
#endif
  }
  KVTIER_RETURN_IF_ERROR(r->Reset());
  return r;
}

}  // namespace kvtier::cli
