// CudaModel: the forward pass of a Model on the GPU for one sequence; see kvtier/cuda_model.h.
// Mirrors Model::Forward (src/model/forward.cc) step for step for one row; the per-layer work
// is the forward_ops.h kernels, AppendKv and DecodeAttention (cuda_kv.h) plus the small
// element-wise kernels below (residual add, bias, GeGLU, soft-cap).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/device_model_impl.cuh"
#include "kvtier/weights.h"

namespace kvtier {


namespace {

// ---- element-wise kernels ----

__global__ void AddKernel(float* x, const float* y, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    x[i] += y[i];
  }
}

// x [n_tok, n] += b [n]
__global__ void BiasKernel(float* x, const float* b, size_t n_tok, uint32_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n_tok * n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    x[i] += b[i % n];
  }
}

// model::GeGlu: gelu's tanh approximation, the same f32 expression.
__global__ void GeGluKernel(float* g, const float* u, size_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f, kCoef = 0.044715f;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = g[i];
    g[i] = 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * x * (1.0f + kCoef * x * x))) * u[i];
  }
}

__global__ void SoftCapKernel(float* x, size_t n, float cap) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    x[i] = cap * tanhf(x[i] / cap);
  }
}

// The residual add and the next RMSNorm in one pass, a thread block per token:
// x[t] += y[t]; out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w (out may be y: every y of a row
// is read before the block's barrier, every out written after it). The sum of squares as
// RmsNormRows (forward_ops.cu) takes it.
constexpr int kAddNormThreads = 256;
__global__ void AddRmsNormKernel(float* x, const float* y, const float* w, uint32_t n, float eps,
                                 float* out) {
  float* xt = x + static_cast<size_t>(blockIdx.x) * n;
  const float* yt = y + static_cast<size_t>(blockIdx.x) * n;
  float* ot = out + static_cast<size_t>(blockIdx.x) * n;
  float ss = 0.0f;
  for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = xt[i] + yt[i];
    xt[i] = v;
    ss = fmaf(v, v, ss);
  }
  __shared__ float part[kAddNormThreads / 32];
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = ss;
  __syncthreads();
  float total = 0.0f;
  for (int i = 0; i < kAddNormThreads / 32; ++i) total += part[i];
  const float inv =
      static_cast<float>(1.0 / sqrt(static_cast<double>(total) / n + static_cast<double>(eps)));
  for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) ot[i] = xt[i] * inv * w[i];
}

// out[r] = x[idx[r]] for n_out rows of n (the tokens whose logits a batched step returns).
__global__ void GatherRowsKernel(const float* x, const int32_t* idx, uint32_t n, float* out) {
  const float* src = x + static_cast<size_t>(idx[blockIdx.x]) * n;
  float* dst = out + static_cast<size_t>(blockIdx.x) * n;
  for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

unsigned GridFor(size_t n) {
  return static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>((n + 255) / 256, 8192)));
}

size_t Align256(size_t n) { return (n + 255) / 256 * 256; }

// A matrix's device form: its own bytes where the GPU multiplies its type, else f32.
struct Upload {
  const GgufTensor* t = nullptr;
  bool as_f32 = false;
  size_t bytes = 0;   // on the device
  size_t offset = 0;  // in the weight buffer
  size_t f32_offset = SIZE_MAX;  // in the resident f32 buffer (gemm_resident_f32), or none
};

}  // namespace

Status CudaModel::Impl::GemmF32(const float* W, uint32_t n_out, uint32_t k, const float* x,
                                uint32_t n_tok, float* y) {
  // Row-major y = x . W^T is column-major Y^T = W^T' . X (as GemmRows).
  const float one = 1.0f, zero = 0.0f;
  const cublasStatus_t st = cublasGemmEx(
      blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n_out), static_cast<int>(n_tok),
      static_cast<int>(k), &one, W, CUDA_R_32F, static_cast<int>(k), x, CUDA_R_32F,
      static_cast<int>(k), &zero, y, CUDA_R_32F, static_cast<int>(n_out), CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS) {
    return Status::Internal("CUDA GEMM (resident f32): cublasGemmEx failed with status " +
                            std::to_string(static_cast<int>(st)));
  }
  return Status::OK();
}

Status CudaModel::Impl::Add(float* a, const float* b, size_t n) {
  AddKernel<<<GridFor(n), 256, 0, stream>>>(a, b, n);
  KVTIER_CUDA_RETURN(cudaGetLastError());
  return Status::OK();
}

Status CudaModel::Impl::AddNorm(float* x, const float* y, const float* w, uint32_t n_tok,
                                uint32_t n, float* out) {
  AddRmsNormKernel<<<n_tok, kAddNormThreads, 0, stream>>>(x, y, w, n, cfg.rms_eps, out);
  KVTIER_CUDA_RETURN(cudaGetLastError());
  return Status::OK();
}

Status CudaModel::Impl::Bias(float* a, const float* b, size_t n_tok, uint32_t n) {
  BiasKernel<<<GridFor(n_tok * n), 256, 0, stream>>>(a, b, n_tok, n);
  KVTIER_CUDA_RETURN(cudaGetLastError());
  return Status::OK();
}

void CudaModel::Impl::DropGraph() {
  if (graph_exec != nullptr) cudaGraphExecDestroy(graph_exec);
  graph_exec = nullptr;
  seen_len = seen_t = 0;
  seen_part = seen_ctr = nullptr;
}

Status CudaModel::Impl::EnsureTable(size_t n_ids) {
  if (n_ids <= table_cap) return Status::OK();
  const size_t cap = std::max(n_ids, table_cap * 2);
  const size_t bytes = off_table + Align256(cap * sizeof(BlockId));
  DropGraph();  // it reads the old io
  KVTIER_CUDA_RETURN(cudaStreamSynchronize(stream));
  KVTIER_ASSIGN_OR_RETURN(DeviceBuffer nio, DeviceBuffer::Allocate(bytes));
  uint8_t* nhost = nullptr;
  KVTIER_CUDA_RETURN(cudaMallocHost(&nhost, bytes));
  if (host_io != nullptr) cudaFreeHost(host_io);
  host_io = nhost;
  scratch_bytes += bytes - io_bytes;
  io = std::move(nio);
  io_bytes = bytes;
  table_cap = cap;
  return Status::OK();
}

namespace {

// The bytes and device form of every tensor the forward pass reads, in one list.
class Planner {
 public:
  explicit Planner(const GgufFile& f) : f_(f) {}
  // A matrix (required); its device form.
  Status Matrix(const std::string& name, Upload** out) {
    const GgufTensor* t = f_.FindTensor(name);
    if (t == nullptr) return Status::InvalidArgument(f_.path() + ": missing tensor " + name);
    return Add(t, out);
  }
  // An optional tensor: *out null when absent.
  Status Optional(const std::string& name, Upload** out) {
    *out = nullptr;
    const GgufTensor* t = f_.FindTensor(name);
    return t == nullptr ? Status::OK() : Add(t, out);
  }
  std::vector<Upload>& list() { return list_; }
  size_t bytes() const { return bytes_; }
  size_t max_dequant_bytes() const { return max_f32_; }

 private:
  Status Add(const GgufTensor* t, Upload** out) {
    Upload u;
    u.t = t;
    const bool vec = t->shape.size() == 1;
    if (vec) {
      u.bytes = t->n_bytes;  // f32 (checked at load)
    } else {
      u.as_f32 = !WeightRowFormat(t->type).ok();
      u.bytes = u.as_f32 ? t->n_values * sizeof(float) : t->n_bytes;
      max_f32_ = std::max<size_t>(max_f32_, t->n_values * sizeof(float));
    }
    u.offset = bytes_;
    bytes_ += Align256(u.bytes);
    list_.push_back(u);
    // Pointers into list_ stay valid: reserve() is called before the first Add.
    *out = &list_.back();
    return Status::OK();
  }
  const GgufFile& f_;
  std::vector<Upload> list_;
  size_t bytes_ = 0, max_f32_ = 0;
};

}  // namespace

bool CudaDeviceAvailable(std::string* why) { return cuda::DeviceAvailable(why); }

CudaModel::CudaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaModel::~CudaModel() = default;

Result<std::unique_ptr<CudaModel>> CudaModel::Create(const Model& model,
                                                     const CudaModelOptions& o) {
  const std::string w = "CUDA model: ";
  const ModelConfig& c = model.config();
  if (c.arch == ModelArch::kQwen35) {
    return Status::Unimplemented(w + "qwen35 (hybrid Gated DeltaNet) does not run on the GPU "
                                 "yet (llama, qwen2, qwen3, phi3, gemma3 do)");
  }
  if (o.k_format.id() != o.v_format.id()) {
    return Status::Unimplemented(w + "K and V formats must be the same on the GPU (got " +
                                 o.k_format.spec() + " / " + o.v_format.spec() + ")");
  }
  const FormatKind kk = o.k_format.kind;
  if (kk != FormatKind::kF16 && kk != FormatKind::kBF16 && kk != FormatKind::kQ8_0 &&
      kk != FormatKind::kQ4_0) {
    return Status::Unimplemented(w + "KV format " + o.k_format.spec() +
                                 " is not implemented on the GPU yet (f16, bf16, q8_0, q4_0)");
  }
  if (c.head_dim != 64 && c.head_dim != 128 && c.head_dim != 256) {
    return Status::Unimplemented(w + "head_dim " + std::to_string(c.head_dim) +
                                 " (the GPU attention kernels take 64, 128, 256)");
  }
  if (c.n_heads / c.n_kv_heads > 8) {
    return Status::Unimplemented(w + std::to_string(c.n_heads / c.n_kv_heads) +
                                 " query heads per KV head (the GPU attention takes 1..8)");
  }
  if (o.max_tokens == 0 || o.max_batch == 0 || o.block_tokens == 0) {
    return Status::InvalidArgument(w + "max_tokens, max_batch and block_tokens must be > 0");
  }
  std::string why;
  if (!cuda::DeviceAvailable(&why)) return Status::Unavailable(w + why);

  auto im = std::make_unique<Impl>();
  im->model = &model;
  im->cfg = c;
  im->opt = o;
  const GgufFile& f = model.gguf();
  const uint32_t E = c.n_embd, D = c.head_dim, H = c.n_heads, Hkv = c.n_kv_heads, F = c.n_ff;
  const uint32_t V = c.n_vocab, B = o.max_batch;

  // 1. What goes up, and how many bytes everything takes.
  Planner plan(f);
  plan.list().reserve(8 + 20 * size_t(c.n_layers));
  struct LayerUp {
    Upload *attn_norm, *wq, *wk, *wv, *wqkv, *wo, *bq, *bk, *bv, *qn, *kn, *ffn_norm, *gate,
        *up, *down, *apn, *fpn;
  };
  Upload *out_w = nullptr, *out_norm = nullptr, *freqs = nullptr;
  KVTIER_RETURN_IF_ERROR(plan.Optional("output.weight", &out_w));
  if (out_w == nullptr) KVTIER_RETURN_IF_ERROR(plan.Matrix("token_embd.weight", &out_w));
  KVTIER_RETURN_IF_ERROR(plan.Matrix("output_norm.weight", &out_norm));
  KVTIER_RETURN_IF_ERROR(plan.Optional("rope_freqs.weight", &freqs));
  std::vector<LayerUp> ups(c.n_layers);
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    LayerUp& u = ups[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    KVTIER_RETURN_IF_ERROR(plan.Matrix(p + "attn_norm.weight", &u.attn_norm));
    KVTIER_RETURN_IF_ERROR(plan.Optional(p + "attn_qkv.weight", &u.wqkv));
    u.wq = u.wk = u.wv = nullptr;
    if (u.wqkv == nullptr) {
      KVTIER_RETURN_IF_ERROR(plan.Matrix(p + "attn_q.weight", &u.wq));
      KVTIER_RETURN_IF_ERROR(plan.Matrix(p + "attn_k.weight", &u.wk));
      KVTIER_RETURN_IF_ERROR(plan.Matrix(p + "attn_v.weight", &u.wv));
    }
    KVTIER_RETURN_IF_ERROR(plan.Matrix(p + "attn_output.weight", &u.wo));
    KVTIER_RETURN_IF_ERROR(plan.Optional(p + "attn_q.bias", &u.bq));
    KVTIER_RETURN_IF_ERROR(plan.Optional(p + "attn_k.bias", &u.bk));
    KVTIER_RETURN_IF_ERROR(plan.Optional(p + "attn_v.bias", &u.bv));
    KVTIER_RETURN_IF_ERROR(plan.Optional(p + "attn_q_norm.weight", &u.qn));
    KVTIER_RETURN_IF_ERROR(plan.Optional(p + "attn_k_norm.weight", &u.kn));
    KVTIER_RETURN_IF_ERROR(plan.Matrix(p + "ffn_norm.weight", &u.ffn_norm));
    KVTIER_RETURN_IF_ERROR(plan.Optional(p + "ffn_gate.weight", &u.gate));
    KVTIER_RETURN_IF_ERROR(plan.Matrix(p + "ffn_up.weight", &u.up));
    KVTIER_RETURN_IF_ERROR(plan.Matrix(p + "ffn_down.weight", &u.down));
    u.apn = u.fpn = nullptr;
    if (c.post_norms) {
      KVTIER_RETURN_IF_ERROR(plan.Matrix(p + "post_attention_norm.weight", &u.apn));
      KVTIER_RETURN_IF_ERROR(plan.Matrix(p + "post_ffw_norm.weight", &u.fpn));
    }
  }
  const uint32_t n_blocks =
      o.pool_blocks > 0 ? o.pool_blocks
                        : static_cast<uint32_t>((uint64_t(o.max_tokens) + o.block_tokens - 1) /
                                                o.block_tokens);
  KVTIER_ASSIGN_OR_RETURN(const KvBlockLayout layout,
                          KvBlockLayout::Make(c.kv_shape(), o.k_format, o.v_format,
                                              o.block_tokens));
  const size_t kv_bytes = size_t(n_blocks) * layout.block_stride;
  const size_t act = size_t(B) * 4 *
                     (2 * size_t(E) + 2 * size_t(H) * D + 2 * size_t(Hkv) * D + 2 * size_t(F) +
                      size_t(V));
  im->off_pos = 0;
  im->off_slots = im->off_pos + Align256(size_t(B) * 4);
  im->off_rows = im->off_slots + Align256(size_t(B) * 8);
  im->off_out = im->off_rows + Align256(size_t(B) * sizeof(PagedKvRow));
  im->off_emb = im->off_out + Align256(size_t(B) * 4);
  im->off_table = im->off_emb + Align256(size_t(B) * E * 4);
  // One sequence: its table; rows: the pool's blocks once over (grows when rows share blocks).
  im->table_cap = n_blocks;
  im->io_bytes = im->off_table + Align256(size_t(im->table_cap) * sizeof(BlockId));
  // cuBLAS path: the largest matrix dequantized to f32 per call; the split-K partials.
  const size_t gemm_ws = B >= o.gemm_min_tokens ? plan.max_dequant_bytes() : 0;
  const size_t attn_ws = size_t(B) * H * 64 * (D + 1) * 4;
  const size_t scratch = act + im->io_bytes + gemm_ws + std::min<size_t>(attn_ws, 256u << 20);
  const size_t needed = plan.bytes() + kv_bytes + scratch;
  size_t free_b = 0, total_b = 0;
  KVTIER_CUDA_RETURN(cudaMemGetInfo(&free_b, &total_b));
  auto gib = [](size_t b) { return std::to_string(b / 1048576) + " MiB"; };
  if (needed > free_b) {
    return Status::ResourceExhausted(
        w + "the model and its context need " + std::to_string(needed) + " bytes (" +
        gib(needed) + ": weights " + gib(plan.bytes()) + ", KV cache " + gib(kv_bytes) + " for " +
        (o.pool_blocks > 0 ? std::to_string(n_blocks) + " blocks of " +
                                 std::to_string(o.block_tokens)
                           : std::to_string(o.max_tokens)) +
        " tokens of " + o.k_format.spec() + ", scratch " +
        gib(scratch) + " for " + std::to_string(B) + "-token calls) but the GPU has " +
        std::to_string(free_b) + " bytes free (" + gib(free_b) + " of " + gib(total_b) + ", " +
        cuda::DeviceDescription() + ")");
  }

  // Resident f32 copies for the cuBLAS path, where they fit in a quarter of what is left.
  size_t f32_bytes = 0;
  if (o.gemm_resident_f32 && B >= o.gemm_min_tokens) {
    for (const Upload& u : plan.list()) {
      if (u.t->shape.size() == 2 && !u.as_f32) f32_bytes += Align256(u.t->n_values * 4);
    }
    if (f32_bytes > 0 && f32_bytes <= (free_b - needed) / 4) {
      size_t off = 0;
      for (Upload& u : plan.list()) {
        if (u.t->shape.size() == 2 && !u.as_f32) {
          u.f32_offset = off;
          off += Align256(u.t->n_values * 4);
        }
      }
    } else {
      f32_bytes = 0;
    }
  }

  // 2. Upload.
  // A blocking stream: ordered after the legacy-stream memsets of the pool and workspaces.
  KVTIER_CUDA_RETURN(cudaStreamCreate(&im->stream));
  if (f32_bytes > 0) {
    KVTIER_ASSIGN_OR_RETURN(im->weights_f32, DeviceBuffer::Allocate(f32_bytes));
    im->weight_bytes += f32_bytes;
    if (cublasCreate(&im->blas) != CUBLAS_STATUS_SUCCESS) {
      im->blas = nullptr;
      return Status::Internal(w + "cublasCreate failed");
    }
    cublasSetStream(im->blas, im->stream);
  }
  KVTIER_ASSIGN_OR_RETURN(im->weights, DeviceBuffer::Allocate(std::max<size_t>(plan.bytes(), 256)));
  im->weight_bytes = plan.bytes();
  std::vector<float> f32;
  // A matrix dequantized to f32 on the host in slices of rows (the host buffer stays small),
  // into buffer `dst` at `offset`.
  auto dequant_up = [&](const GgufTensor& t, DeviceBuffer& dst, size_t offset) -> Status {
    const size_t n_in = t.shape[0], n_out = t.shape[1];
    KVTIER_ASSIGN_OR_RETURN(const size_t rb, WeightRowBytes(t.type, n_in));
    const size_t step = std::max<size_t>(1, (16u << 20) / (n_in * 4));
    for (size_t r = 0; r < n_out; r += step) {
      const size_t n = std::min(step, n_out - r);
      f32.resize(n * n_in);
      KVTIER_RETURN_IF_ERROR(DequantizeWeightRows(t.type, t.data + r * rb, n, n_in, f32.data()));
      KVTIER_RETURN_IF_ERROR(dst.CopyFromHost(f32.data(), n * n_in * 4, offset + r * n_in * 4));
    }
    return Status::OK();
  };
  for (const Upload& u : plan.list()) {
    const GgufTensor& t = *u.t;
    if (u.f32_offset != SIZE_MAX) {
      KVTIER_RETURN_IF_ERROR(dequant_up(t, im->weights_f32, u.f32_offset));
    }
    if (!u.as_f32) {
      KVTIER_RETURN_IF_ERROR(im->weights.CopyFromHost(t.data, t.n_bytes, u.offset));
      continue;
    }
    KVTIER_RETURN_IF_ERROR(dequant_up(t, im->weights, u.offset));
  }
  const uint8_t* base = im->weights.as<uint8_t>();
  auto vec = [&](const Upload* u) -> const float* {
    return u ? reinterpret_cast<const float*>(base + u->offset) : nullptr;
  };
  auto mat = [&](const Upload* u) -> Result<DevMat> {
    DevMat m;
    if (u == nullptr) return m;
    m.data = base + u->offset;
    if (u->as_f32) {
      m.f32 = reinterpret_cast<const float*>(m.data);
    } else if (u->f32_offset != SIZE_MAX) {
      m.f32 = reinterpret_cast<const float*>(im->weights_f32.as<uint8_t>() + u->f32_offset);
    }
    m.n_in = static_cast<uint32_t>(u->t->shape[0]);
    m.n_out = static_cast<uint32_t>(u->t->shape[1]);
    if (u->as_f32) {
      m.format = Format::F32();
    } else {
      KVTIER_ASSIGN_OR_RETURN(m.format, WeightRowFormat(u->t->type));
    }
    m.row_bytes = m.format.row_bytes(m.n_in);
    if (m.n_in % 32 != 0) {
      return Status::Unimplemented(w + "tensor " + u->t->name + " has rows of " +
                                   std::to_string(m.n_in) +
                                   " values; the GPU kernels need a multiple of 32");
    }
    return m;
  };
  KVTIER_ASSIGN_OR_RETURN(im->output, mat(out_w));
  im->output_norm = vec(out_norm);
  im->rope_freqs = vec(freqs);
  im->layers.resize(c.n_layers);
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const LayerUp& u = ups[l];
    DevLayer& L = im->layers[l];
    L.attn_norm = vec(u.attn_norm);
    KVTIER_ASSIGN_OR_RETURN(L.wqkv, mat(u.wqkv));
    KVTIER_ASSIGN_OR_RETURN(L.wq, mat(u.wq));
    KVTIER_ASSIGN_OR_RETURN(L.wk, mat(u.wk));
    KVTIER_ASSIGN_OR_RETURN(L.wv, mat(u.wv));
    KVTIER_ASSIGN_OR_RETURN(L.wo, mat(u.wo));
    L.bq = vec(u.bq);
    L.bk = vec(u.bk);
    L.bv = vec(u.bv);
    L.q_norm = vec(u.qn);
    L.k_norm = vec(u.kn);
    L.ffn_norm = vec(u.ffn_norm);
    KVTIER_ASSIGN_OR_RETURN(L.gate, mat(u.gate));
    KVTIER_ASSIGN_OR_RETURN(L.up, mat(u.up));
    KVTIER_ASSIGN_OR_RETURN(L.down, mat(u.down));
    L.attn_post_norm = vec(u.apn);
    L.ffn_post_norm = vec(u.fpn);
    // Rows back to back in one format: one product for a one-token step.
    auto joined = [](const DevMat& a, const DevMat& b) {
      return a.data != nullptr && b.data != nullptr && a.format.id() == b.format.id() &&
             a.n_in == b.n_in && a.data + size_t(a.n_out) * a.row_bytes == b.data;
    };
    auto join = [](DevMat a, const DevMat& b) {
      a.n_out += b.n_out;
      a.f32 = nullptr;  // the resident copies need not lie back to back
      return a;
    };
    if (L.wqkv.data != nullptr) {
      L.qkv1 = L.wqkv;
    } else if (joined(L.wq, L.wk) && joined(L.wk, L.wv)) {
      L.qkv1 = join(join(L.wq, L.wk), L.wv);
    }
    if (L.gate.data == nullptr) {
      L.gu1 = L.up;
    } else if (joined(L.gate, L.up)) {
      L.gu1 = join(L.gate, L.up);
    }
  }

  // 3. KV pool, scratch, the per-call input buffer.
  KVTIER_ASSIGN_OR_RETURN(im->pool, cuda::DevicePool::Create(c.kv_shape(), o.k_format,
                                                             o.v_format, o.block_tokens,
                                                             n_blocks));
  auto alloc = [&](DeviceBuffer* b, size_t floats) -> Status {
    KVTIER_ASSIGN_OR_RETURN(*b, DeviceBuffer::Allocate(std::max<size_t>(floats * 4, 256)));
    im->scratch_bytes += b->size();
    return Status::OK();
  };
  KVTIER_RETURN_IF_ERROR(alloc(&im->x, size_t(B) * E));
  KVTIER_RETURN_IF_ERROR(alloc(&im->xb, size_t(B) * E));
  KVTIER_RETURN_IF_ERROR(alloc(&im->q, size_t(B) * H * D));
  KVTIER_RETURN_IF_ERROR(alloc(&im->att, size_t(B) * H * D));
  KVTIER_RETURN_IF_ERROR(alloc(&im->k, size_t(B) * Hkv * D));
  KVTIER_RETURN_IF_ERROR(alloc(&im->v, size_t(B) * Hkv * D));
  KVTIER_RETURN_IF_ERROR(alloc(&im->gate, size_t(B) * F));
  KVTIER_RETURN_IF_ERROR(alloc(&im->up, size_t(B) * F));
  KVTIER_RETURN_IF_ERROR(alloc(&im->logits, size_t(B) * V));
  KVTIER_RETURN_IF_ERROR(alloc(&im->one, (size_t(H) + 2 * Hkv) * D + 2 * size_t(F)));
  KVTIER_ASSIGN_OR_RETURN(im->io, DeviceBuffer::Allocate(im->io_bytes));
  im->scratch_bytes += im->io_bytes;
  KVTIER_CUDA_RETURN(cudaMallocHost(&im->host_io, im->io_bytes));
  KVTIER_CUDA_RETURN(cudaDeviceSynchronize());
  return std::unique_ptr<CudaModel>(new CudaModel(std::move(im)));
}

Status CudaModel::Impl::Run(std::span<const int32_t> tokens, bool all_logits,
                            float* host_logits) {
  const ModelConfig& c = cfg;
  const std::string w = "CUDA forward: ";
  if (opt.pool_blocks > 0) {
    return Status::InvalidArgument(w + "this CudaModel's blocks are the caller's "
                                      "(pool_blocks); use ForwardRows");
  }
  const uint32_t T = static_cast<uint32_t>(tokens.size());
  if (T == 0 || T > opt.max_batch) {
    return Status::InvalidArgument(w + std::to_string(T) + " tokens in one call (1.." +
                                   std::to_string(opt.max_batch) + ")");
  }
  if (uint64_t(length) + T > opt.max_tokens) {
    return Status::OutOfRange(w + "the sequence would hold " + std::to_string(length + T) +
                              " tokens, past the " + std::to_string(opt.max_tokens) +
                              " its device KV cache was made for");
  }
  const size_t E = c.n_embd, V = c.n_vocab;
  for (uint32_t j = 0; j < T; ++j) {
    if (tokens[j] < 0 || static_cast<uint32_t>(tokens[j]) >= c.n_vocab) {
      return Status::InvalidArgument(w + "token " + std::to_string(j) + " has id " +
                                     std::to_string(tokens[j]) + ", outside the vocabulary [0, " +
                                     std::to_string(c.n_vocab) + ")");
    }
  }
  const uint32_t bt = opt.block_tokens;
  const size_t need_blocks = (size_t(length) + T + bt - 1) / bt;
  if (table.size() < need_blocks) {
    KVTIER_RETURN_IF_ERROR(pool->Allocate(need_blocks - table.size(), &table));
  }
  // Inputs on the host, one copy up.
  const GgufTensor* embd = model->gguf().FindTensor("token_embd.weight");
  KVTIER_ASSIGN_OR_RETURN(const size_t embd_row, WeightRowBytes(embd->type, E));
  float* emb = reinterpret_cast<float*>(host_io + off_emb);
  auto* pos = reinterpret_cast<int32_t*>(host_io + off_pos);
  auto* slots = reinterpret_cast<int64_t*>(host_io + off_slots);
  auto* rows = reinterpret_cast<PagedKvRow*>(host_io + off_rows);
  auto* tab = reinterpret_cast<BlockId*>(host_io + off_table);
  const auto* dev_table = reinterpret_cast<const BlockId*>(io.as<uint8_t>() + off_table);
  for (uint32_t j = 0; j < T; ++j) {
    KVTIER_RETURN_IF_ERROR(DequantizeWeightRows(embd->type, embd->data + tokens[j] * embd_row, 1,
                                                E, emb + j * E));
    if (c.embd_scale != 1.0f) {
      for (size_t i = 0; i < E; ++i) emb[j * E + i] *= c.embd_scale;
    }
    const uint32_t p = length + j;
    pos[j] = static_cast<int32_t>(p);
    slots[j] = int64_t(table[p / bt]) * bt + p % bt;
    rows[j].block_table = dev_table;
    rows[j].n_blocks = static_cast<uint32_t>(table.size());
    rows[j].length = p + 1;  // causal: token j sees keys 0 .. p
  }
  std::memcpy(tab, table.data(), table.size() * sizeof(BlockId));
  KVTIER_CUDA_RETURN(cudaMemcpyAsync(io.data(), host_io, off_emb, cudaMemcpyHostToDevice,
                                     stream));
  KVTIER_CUDA_RETURN(cudaMemcpyAsync(io.as<uint8_t>() + off_table, tab,
                                     table.size() * sizeof(BlockId), cudaMemcpyHostToDevice,
                                     stream));
  KVTIER_CUDA_RETURN(cudaMemcpyAsync(x.data(), emb, T * E * 4, cudaMemcpyHostToDevice, stream));
  // The attention's key bound: exact for prompts; for one-token steps rounded up to 256, so
  // the kernel's split (and so a captured graph) stays the same for 256 steps, with or
  // without graphs.
  const uint32_t max_length = T == 1 ? (length + T + 255) / 256 * 256 : length + T;
  const uint32_t n_out = all_logits ? T : 1;
  if (T == 1 && opt.graphs && !graph_failed) {
    KVTIER_RETURN_IF_ERROR(LaunchGraph(1, max_length));
  } else {
    KVTIER_RETURN_IF_ERROR(Body(T, n_out, max_length, false));
  }
  float* LG = logits.as<float>();
  KVTIER_CUDA_RETURN(cudaMemcpyAsync(host_logits, LG, n_out * V * 4, cudaMemcpyDeviceToHost,
                                     stream));
  KVTIER_CUDA_RETURN(cudaStreamSynchronize(stream));
  length += T;
  for (size_t i = 0; i < n_out * V; ++i) {
    if (!std::isfinite(host_logits[i])) {
      return Status::Internal(w + "non-finite values (NaN or Inf) in the logits at position " +
                              std::to_string(length - n_out + i / V));
    }
  }
  return Status::OK();
}

// One-token steps (T rows of one token) through a CUDA graph: the first step at a key (T, the
// attention's key bound and workspace) runs eagerly (any workspace grows then), the next one
// captures the step's launches, later ones replay them. A failed capture falls back to eager
// launches for good.
Status CudaModel::Impl::LaunchGraph(uint32_t T, uint32_t max_length) {
  const void* part = dws.partial.data();
  const void* ctr = dws.counters.data();
  if (graph_exec != nullptr && graph_key_t == T && graph_key_len == max_length &&
      graph_key_part == part && graph_key_ctr == ctr) {
    KVTIER_CUDA_RETURN(cudaGraphLaunch(graph_exec, stream));
    return Status::OK();
  }
  if (graph_exec != nullptr) {
    cudaGraphExecDestroy(graph_exec);
    graph_exec = nullptr;
  }
  if (!(seen_t == T && seen_len == max_length && seen_part == part && seen_ctr == ctr)) {
    KVTIER_RETURN_IF_ERROR(Body(T, T, max_length, false));
    seen_t = T;
    seen_len = max_length;
    seen_part = dws.partial.data();
    seen_ctr = dws.counters.data();
    return Status::OK();
  }
  cudaGraph_t g = nullptr;
  KVTIER_CUDA_RETURN(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const Status body = Body(T, T, max_length, false);
  const cudaError_t end = cudaStreamEndCapture(stream, &g);
  cudaError_t inst = cudaErrorUnknown;
  if (body.ok() && end == cudaSuccess && g != nullptr) {
    inst = cudaGraphInstantiate(&graph_exec, g, 0);
  }
  if (g != nullptr) cudaGraphDestroy(g);
  if (inst != cudaSuccess) {
    cudaGetLastError();
    graph_exec = nullptr;
    graph_failed = true;
    return Body(T, T, max_length, false);
  }
  graph_key_t = T;
  graph_key_len = max_length;
  graph_key_part = part;
  graph_key_ctr = ctr;
  KVTIER_CUDA_RETURN(cudaGraphLaunch(graph_exec, stream));
  return Status::OK();
}

// The layers, the final norm and the logits [n_out, V] (the last n_out of T tokens, or with
// `gather` those out_idx names) on the device, from x [T, E] and the inputs in `io`.
Status CudaModel::Impl::Body(uint32_t T, uint32_t n_out, uint32_t max_length, bool gather) {
  const ModelConfig& c = cfg;
  const size_t E = c.n_embd, D = c.head_dim, H = c.n_heads, Hkv = c.n_kv_heads, F = c.n_ff;
  const size_t V = c.n_vocab;
  const auto* dpos = reinterpret_cast<const int32_t*>(io.as<uint8_t>() + off_pos);
  const auto* dslots = reinterpret_cast<const int64_t*>(io.as<uint8_t>() + off_slots);
  const auto* drows = reinterpret_cast<const PagedKvRow*>(io.as<uint8_t>() + off_rows);

  float *X = x.as<float>(), *XB = xb.as<float>(), *Q = q.as<float>(), *K = k.as<float>();
  float *Vv = v.as<float>(), *ATT = att.as<float>(), *G = gate.as<float>(), *U = up.as<float>();
  float* ONE = one.as<float>();
  cuda::DeviceRope rope;
  rope.head_dim = c.head_dim;
  rope.n_dims = c.rope_dims;
  rope.neox = c.rope_neox;
  rope.freq_factors = rope_freqs;
  AttentionParams ap;
  ap.n_heads = c.n_heads;
  ap.scale = c.attn_scale > 0.0f ? c.attn_scale : 1.0f / std::sqrt(static_cast<float>(D));
  cuda::DecodeOptions dopt;
  dopt.max_length = max_length;
  dopt.stream = stream;
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    const DevLayer& L = layers[l];
    ap.window = c.layer_window(l);
    rope.theta_base = ap.window > 0 ? c.rope_theta_swa : c.rope_theta;
    rope.pos_scale = ap.window > 0 ? 1.0f : c.rope_pos_scale;
    if (l == 0) {  // later layers: the previous layer's last add normalized into XB
      KVTIER_RETURN_IF_ERROR(cuda::RmsNormRows(X, L.attn_norm, T, E, c.rms_eps, XB, stream));
    }
    float *Qp = Q, *Kp = K, *Vp = Vv;
    if (T == 1 && L.qkv1.data != nullptr) {  // one product: [q | k | v]
      Qp = ONE;
      Kp = ONE + H * D;
      Vp = Kp + Hkv * D;
      KVTIER_RETURN_IF_ERROR(Mat(L.qkv1, 0, (H + 2 * Hkv) * D, XB, 1, ONE));
    } else if (L.wqkv.data != nullptr) {  // fused rows q, k, v: three products over row ranges
      KVTIER_RETURN_IF_ERROR(Mat(L.wqkv, 0, H * D, XB, T, Q));
      KVTIER_RETURN_IF_ERROR(Mat(L.wqkv, H * D, Hkv * D, XB, T, K));
      KVTIER_RETURN_IF_ERROR(Mat(L.wqkv, (H + Hkv) * D, Hkv * D, XB, T, Vv));
    } else {
      KVTIER_RETURN_IF_ERROR(Mat(L.wq, 0, H * D, XB, T, Q));
      KVTIER_RETURN_IF_ERROR(Mat(L.wk, 0, Hkv * D, XB, T, K));
      KVTIER_RETURN_IF_ERROR(Mat(L.wv, 0, Hkv * D, XB, T, Vv));
    }
    if (L.bq != nullptr) {
      KVTIER_RETURN_IF_ERROR(Bias(Qp, L.bq, T, H * D));
      KVTIER_RETURN_IF_ERROR(Bias(Kp, L.bk, T, Hkv * D));
      KVTIER_RETURN_IF_ERROR(Bias(Vp, L.bv, T, Hkv * D));
    }
    if (L.q_norm != nullptr) {
      KVTIER_RETURN_IF_ERROR(cuda::RmsNormRows(Qp, L.q_norm, T * H, D, c.rms_eps, Qp, stream));
      KVTIER_RETURN_IF_ERROR(cuda::RmsNormRows(Kp, L.k_norm, T * Hkv, D, c.rms_eps, Kp, stream));
    }
    if (T == 1 && Kp == Qp + H * D) {  // q and k heads side by side: one launch
      KVTIER_RETURN_IF_ERROR(cuda::RopeRows(Qp, 1, H + Hkv, dpos, rope, stream));
    } else {
      KVTIER_RETURN_IF_ERROR(cuda::RopeRows(Qp, T, H, dpos, rope, stream));
      KVTIER_RETURN_IF_ERROR(cuda::RopeRows(Kp, T, Hkv, dpos, rope, stream));
    }
    KVTIER_RETURN_IF_ERROR(cuda::AppendKv(*pool, l, DType::kF32, Kp, Vp, dslots, T, stream));
    const PagedKvView view = pool->View(l, drows, T);
    KVTIER_RETURN_IF_ERROR(cuda::DecodeAttention(view, Qp, ap, ATT, dopt, &dws));
    KVTIER_RETURN_IF_ERROR(Mat(L.wo, 0, E, ATT, T, XB));
    if (L.attn_post_norm != nullptr) {
      KVTIER_RETURN_IF_ERROR(cuda::RmsNormRows(XB, L.attn_post_norm, T, E, c.rms_eps, XB, stream));
    }
    KVTIER_RETURN_IF_ERROR(AddNorm(X, XB, L.ffn_norm, T, E, XB));
    float *Gp = G, *Up = U;
    if (T == 1 && L.gu1.data != nullptr) {  // one product: [gate | up]
      Gp = ONE + (H + 2 * Hkv) * D;
      Up = Gp + F;
      KVTIER_RETURN_IF_ERROR(Mat(L.gu1, 0, 2 * F, XB, 1, Gp));
    } else if (L.gate.data == nullptr) {  // fused: rows gate then up
      KVTIER_RETURN_IF_ERROR(Mat(L.up, 0, F, XB, T, G));
      KVTIER_RETURN_IF_ERROR(Mat(L.up, F, F, XB, T, U));
    } else {
      KVTIER_RETURN_IF_ERROR(Mat(L.gate, 0, F, XB, T, G));
      KVTIER_RETURN_IF_ERROR(Mat(L.up, 0, F, XB, T, U));
    }
    if (c.ffn_act == FfnActivation::kGeluTanh) {
      GeGluKernel<<<GridFor(T * F), 256, 0, stream>>>(Gp, Up, T * F);
      KVTIER_CUDA_RETURN(cudaGetLastError());
    } else {
      KVTIER_RETURN_IF_ERROR(cuda::SwiGluRows(Gp, Up, T * F, stream));
    }
    KVTIER_RETURN_IF_ERROR(Mat(L.down, 0, E, Gp, T, XB));
    if (L.ffn_post_norm != nullptr) {
      KVTIER_RETURN_IF_ERROR(cuda::RmsNormRows(XB, L.ffn_post_norm, T, E, c.rms_eps, XB, stream));
    }
    if (l + 1 < c.n_layers) {
      KVTIER_RETURN_IF_ERROR(AddNorm(X, XB, layers[l + 1].attn_norm, T, E, XB));
    } else {
      KVTIER_RETURN_IF_ERROR(Add(X, XB, T * E));
    }
  }
  const float* last = X + size_t(T - n_out) * E;
  if (gather) {  // the rows' last tokens into XB, normalized in place
    const auto* didx = reinterpret_cast<const int32_t*>(io.as<uint8_t>() + off_out);
    GatherRowsKernel<<<n_out, 256, 0, stream>>>(X, didx, static_cast<uint32_t>(E), XB);
    KVTIER_CUDA_RETURN(cudaGetLastError());
    last = XB;
  }
  KVTIER_RETURN_IF_ERROR(cuda::RmsNormRows(last, output_norm, n_out, E, c.rms_eps, XB, stream));
  float* LG = logits.as<float>();
  KVTIER_RETURN_IF_ERROR(Mat(output, 0, static_cast<uint32_t>(V), XB, n_out, LG));
  if (c.final_softcap > 0.0f) {
    SoftCapKernel<<<GridFor(n_out * V), 256, 0, stream>>>(LG, n_out * V, c.final_softcap);
    KVTIER_CUDA_RETURN(cudaGetLastError());
  }
  return Status::OK();
}

Status CudaModel::Forward(std::span<const int32_t> tokens, bool all_logits, float* logits) {
  return impl_->Run(tokens, all_logits, logits);
}

void CudaModel::Reset() {
  impl_->pool->Free(impl_->table);
  impl_->table.clear();
  impl_->length = 0;
}

uint32_t CudaModel::length() const { return impl_->length; }
size_t CudaModel::weight_bytes() const { return impl_->weight_bytes; }
size_t CudaModel::kv_bytes() const { return impl_->pool->bytes(); }
size_t CudaModel::scratch_bytes() const { return impl_->scratch_bytes; }
std::string CudaModel::device() const { return cuda::DeviceDescription(); }

}  // namespace kvtier
