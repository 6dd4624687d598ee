// DevicePool, DeviceBuffer and the quantize-on-append kernels (see cuda_kv.h).
//
// Append: one thread block per token. Plain formats convert element by element. q8_0 / q4_0:
// one warp per 32-value ggml block, lane i holding value i; the block's amax (q4_0: the
// signed value of largest magnitude, the first one on ties) comes from a warp reduction that
// gives the CPU loop's answer on every input (NaN ignored, +0 when all are zero), and every
// multiply, divide and add is an explicitly rounded intrinsic, so nothing is contracted into
// an FMA: the bytes equal quant_ref.cc's. Rotated rows (rot<bits>s<seed>): a warp per row,
// staged in shared memory, rotated and quantized as rot.cuh says (the same bytes too).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "cuda/cuda_common.cuh"
#include "cuda/cuda_kv.h"
#include "cuda/rot.cuh"
#include "quant/blocks.h"
#include "quant/rot.h"

namespace kvtier::cuda {

bool DeviceAvailable(std::string* why) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    if (why) {
      *why = e != cudaSuccess ? std::string("no CUDA device: ") + cudaGetErrorString(e)
                              : std::string("no CUDA device");
    }
    cudaGetLastError();
    return false;
  }
  e = cudaFree(nullptr);  // creates the context
  if (e != cudaSuccess) {
    if (why) *why = std::string("CUDA context: ") + cudaGetErrorString(e);
    cudaGetLastError();
    return false;
  }
  return true;
}

std::string DeviceDescription() {
  int dev = 0;
  cudaDeviceProp p{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
    return "no CUDA device";
  }
  char buf[768];
  std::snprintf(buf, sizeof buf, "%s, sm_%d%d, %d SMs, %.1f GiB, %d MB L2", p.name, p.major,
                p.minor, p.multiProcessorCount, p.totalGlobalMem / 1073741824.0,
                p.l2CacheSize >> 20);
  return buf;
}

Status Synchronize() {
  KVTIER_CUDA_RETURN(cudaDeviceSynchronize());
  return Status::OK();
}

// ---- DeviceBuffer ----

Result<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes) {
  DeviceBuffer b;
  if (bytes == 0) return Result<DeviceBuffer>(std::move(b));
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  const cudaError_t e = cudaMalloc(&b.ptr_, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return Status::ResourceExhausted("CUDA: cudaMalloc of " + std::to_string(bytes) +
                                     " bytes failed (" + cudaGetErrorString(e) + "); " +
                                     std::to_string(free_b) + " of " + std::to_string(total_b) +
                                     " bytes free");
  }
  b.bytes_ = bytes;
  return Result<DeviceBuffer>(std::move(b));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
  o.ptr_ = nullptr;
  o.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

Status DeviceBuffer::CopyFromHost(const void* src, size_t bytes, size_t offset) {
  if (offset + bytes > bytes_) return Status::OutOfRange("DeviceBuffer::CopyFromHost past the end");
  KVTIER_CUDA_RETURN(cudaMemcpy(static_cast<uint8_t*>(ptr_) + offset, src, bytes,
                                cudaMemcpyHostToDevice));
  return Status::OK();
}

Status DeviceBuffer::CopyToHost(void* dst, size_t bytes, size_t offset) const {
  if (offset + bytes > bytes_) return Status::OutOfRange("DeviceBuffer::CopyToHost past the end");
  KVTIER_CUDA_RETURN(cudaMemcpy(dst, static_cast<const uint8_t*>(ptr_) + offset, bytes,
                                cudaMemcpyDeviceToHost));
  return Status::OK();
}

Status DeviceBuffer::Fill(uint8_t value) {
  if (bytes_ == 0) return Status::OK();
  KVTIER_CUDA_RETURN(cudaMemset(ptr_, value, bytes_));
  return Status::OK();
}

// ---- DevicePool ----

DevicePool::DevicePool(const KvBlockLayout& layout, uint32_t n_blocks, DeviceBuffer mem)
    : layout_(layout), n_blocks_(n_blocks), mem_(std::move(mem)) {
  free_.reserve(n_blocks);
  for (uint32_t i = n_blocks; i-- > 0;) free_.push_back(static_cast<BlockId>(i));
}

Result<std::unique_ptr<DevicePool>> DevicePool::Create(const KvShape& shape,
                                                       const Format& k_format,
                                                       const Format& v_format,
                                                       uint32_t block_tokens, uint32_t n_blocks) {
  KVTIER_ASSIGN_OR_RETURN(KvBlockLayout layout,
                          KvBlockLayout::Make(shape, k_format, v_format, block_tokens));
  if (n_blocks == 0 || n_blocks > static_cast<uint32_t>(INT32_MAX)) {
    return Status::InvalidArgument("DevicePool: n_blocks " + std::to_string(n_blocks) +
                                   " invalid: expected 1..2^31-1");
  }
  const size_t bytes = static_cast<size_t>(n_blocks) * layout.block_stride;
  KVTIER_ASSIGN_OR_RETURN(DeviceBuffer mem, DeviceBuffer::Allocate(bytes));
  KVTIER_RETURN_IF_ERROR(mem.Fill(0));
  return std::unique_ptr<DevicePool>(new DevicePool(layout, n_blocks, std::move(mem)));
}

Status DevicePool::Allocate(size_t n, std::vector<BlockId>* out) {
  if (n > free_.size()) {
    return Status::ResourceExhausted(
        "DevicePool: " + std::to_string(n) + " blocks of " + std::to_string(layout_.block_stride) +
        " bytes needed, " + std::to_string(free_.size()) + " of " + std::to_string(n_blocks_) +
        " free");
  }
  for (size_t i = 0; i < n; ++i) {
    out->push_back(free_.back());
    free_.pop_back();
  }
  return Status::OK();
}

void DevicePool::Free(const std::vector<BlockId>& ids) {
  for (BlockId id : ids) free_.push_back(id);
}

PagedKvView DevicePool::View(uint32_t layer, const PagedKvRow* dev_rows, uint32_t n_rows) const {
  return layout_.View(base(), layer, dev_rows, n_rows);
}

Status DevicePool::CopyBlockToHost(BlockId id, void* dst) const {
  if (id < 0 || static_cast<uint32_t>(id) >= n_blocks_) {
    return Status::InvalidArgument("DevicePool: block " + std::to_string(id) + " out of range");
  }
  KVTIER_CUDA_RETURN(cudaMemcpy(dst, block_data(id), layout_.block_stride, cudaMemcpyDeviceToHost));
  return Status::OK();
}

Status DevicePool::CopyBlockFromHost(BlockId id, const void* src) {
  if (id < 0 || static_cast<uint32_t>(id) >= n_blocks_) {
    return Status::InvalidArgument("DevicePool: block " + std::to_string(id) + " out of range");
  }
  KVTIER_CUDA_RETURN(cudaMemcpy(block_data(id), src, layout_.block_stride, cudaMemcpyHostToDevice));
  return Status::OK();
}

// ---- quantize-on-append ----

namespace {

struct AppendArgs {
  uint8_t* base;  // block 0 of the pool
  size_t block_stride;
  size_t k_off, v_off;  // of the layer inside a block
  size_t k_token_stride, v_token_stride;
  size_t k_row_bytes, v_row_bytes;
  uint32_t block_tokens, n_kv_heads, head_dim;
  FormatKind k_kind, v_kind;
  DType k_dtype, v_dtype;  // plain formats' own dtype
  DType src_dtype;
  const void* k;
  const void* v;
  const int64_t* slots;
  RotConsts k_rot, v_rot;  // rot formats only
};

constexpr int kAppendThreads = 256;

// One ggml block (32 values) held one value per lane; writes 34 (q8_0) or 18 (q4_0) bytes.
__device__ void QuantizeGgmlBlockWarp(bool q8, float x, uint8_t* dst, int lane) {
  const unsigned full = 0xffffffffu;
  const float ax = fabsf(x);
  if (q8) {
    // CPU: amax = std::max(amax, |x|) from 0: NaN never wins. fmaxf drops NaN the same way.
    float amax = isnan(ax) ? 0.0f : ax;
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(full, amax, o));
    const float d = __fdiv_rn(amax, 127.0f);
    const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    const float v = __fmul_rn(x, id);
    const int32_t q = min(max(dev::ToInt32OrMin(truncf(roundf(v))), -127), 127);
    if (lane == 0) {
      const uint16_t dh = dev::F32ToF16(d);
      dst[0] = static_cast<uint8_t>(dh);
      dst[1] = static_cast<uint8_t>(dh >> 8);
    }
    dst[2 + lane] = static_cast<uint8_t>(static_cast<int8_t>(q));
  } else {
    // CPU: the first value whose |x| is strictly larger than all before (from 0) wins.
    float key = isnan(ax) ? -1.0f : ax;
    int idx = lane;
    for (int o = 16; o > 0; o >>= 1) {
      const float ok = __shfl_xor_sync(full, key, o);
      const int oi = __shfl_xor_sync(full, idx, o);
      if (ok > key || (ok == key && oi < idx)) {
        key = ok;
        idx = oi;
      }
    }
    const float xmax = __shfl_sync(full, x, idx);
    const float max = key > 0.0f ? xmax : 0.0f;
    const float d = __fdiv_rn(max, -8.0f);
    const float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    const float v = __fmul_rn(x, id);
    const uint32_t q =
        static_cast<uint8_t>(dev::ToInt32OrMin(fminf(fmaxf(__fadd_rn(v, 8.5f), 0.0f), 15.0f)));
    const uint32_t hi = __shfl_down_sync(full, q, 16);
    if (lane == 0) {
      const uint16_t dh = dev::F32ToF16(d);
      dst[0] = static_cast<uint8_t>(dh);
      dst[1] = static_cast<uint8_t>(dh >> 8);
    }
    if (lane < 16) dst[2 + lane] = static_cast<uint8_t>(q | (hi << 4));
  }
}

__global__ void AppendKernel(AppendArgs a) {
  const uint32_t tok = blockIdx.x;
  const int64_t slot_id = a.slots[tok];
  if (slot_id < 0) return;
  const int64_t block = slot_id / a.block_tokens;
  const uint32_t slot = static_cast<uint32_t>(slot_id % a.block_tokens);
  const size_t row_elems = static_cast<size_t>(a.n_kv_heads) * a.head_dim;
  const size_t src_esize = a.src_dtype == DType::kF32 ? 4 : 2;
  for (int kv = 0; kv < 2; ++kv) {
    const FormatKind kind = kv ? a.v_kind : a.k_kind;
    const DType plain = kv ? a.v_dtype : a.k_dtype;
    const uint8_t* src =
        static_cast<const uint8_t*>(kv ? a.v : a.k) + tok * row_elems * src_esize;
    uint8_t* dst = a.base + block * a.block_stride + (kv ? a.v_off : a.k_off) +
                   slot * (kv ? a.v_token_stride : a.k_token_stride);
    const size_t row_bytes = kv ? a.v_row_bytes : a.k_row_bytes;
    if (kind == FormatKind::kRot) {
      // A warp per KV head: the row into shared memory, rotated, then its 32-value blocks.
      __shared__ float rows[kAppendThreads / 32][kRotMaxHeadDim];
      const RotConsts& rc = kv ? a.v_rot : a.k_rot;
      const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
      float* y = rows[wid];
      const size_t bb = 2 + 4 * static_cast<size_t>(rc.bits);
      for (uint32_t h = wid; h < a.n_kv_heads; h += kAppendThreads / 32) {
        for (uint32_t i = lane; i < a.head_dim; i += 32) {
          y[i] = dev::LoadAs(a.src_dtype, src, static_cast<size_t>(h) * a.head_dim + i);
        }
        __syncwarp();
        dev::RotateRowWarp(y, a.head_dim, rc.seed, lane);
        for (uint32_t j = 0; j < a.head_dim / 32; ++j) {
          dev::QuantizeRotBlockWarp(y[32 * j + lane], rc, dst + h * row_bytes + j * bb, lane);
        }
        __syncwarp();
      }
    } else if (kind == FormatKind::kF32 || kind == FormatKind::kF16 || kind == FormatKind::kBF16) {
      // Rows of one token are adjacent (head stride == row bytes), so the token is one run.
      for (size_t i = threadIdx.x; i < row_elems; i += blockDim.x) {
        dev::StoreAs(plain, dst, i, dev::LoadAs(a.src_dtype, src, i));
      }
    } else {
      const bool q8 = kind == FormatKind::kQ8_0;
      const size_t block_bytes = q8 ? 34 : 18;
      const size_t blocks_per_row = a.head_dim / 32;
      const size_t n_blocks = a.n_kv_heads * blocks_per_row;
      const int lane = threadIdx.x & 31;
      for (size_t b = threadIdx.x >> 5; b < n_blocks; b += blockDim.x >> 5) {
        const size_t h = b / blocks_per_row, j = b % blocks_per_row;
        const float x = dev::LoadAs(a.src_dtype, src, b * 32 + lane);
        QuantizeGgmlBlockWarp(q8, x, dst + h * row_bytes + j * block_bytes, lane);
      }
    }
  }
}

template <int kBits>
void FillRot(const Format& f, RotConsts* rc) {
  static constexpr RotMids<kBits> kMids;
  rc->n_levels = 1 << kBits;
  rc->bits = kBits;
  rc->seed = f.seed;
  for (int t = 0; t < (1 << kBits); ++t) rc->levels[t] = RotLevels<kBits>()[t];
  for (int t = 0; t + 1 < (1 << kBits); ++t) rc->mids[t] = kMids.m[t];
}

void RotConstsOf(const Format& f, RotConsts* rc) {
  if (f.kind != FormatKind::kRot) return;
  if (f.bits == 2) FillRot<2>(f, rc);
  else if (f.bits == 3) FillRot<3>(f, rc);
  else FillRot<4>(f, rc);
}

}  // namespace

Status AppendKv(const DevicePool& pool, uint32_t layer, DType src_dtype, const void* k,
                const void* v, const int64_t* slot_mapping, uint32_t n_tokens, void* stream) {
  const KvBlockLayout& l = pool.layout();
  for (const Format* f : {&l.k_format, &l.v_format}) {
    if (f->kind == FormatKind::kAffine || f->is_token_grouped()) {
      return Status::Unimplemented("CUDA AppendKv: format " + f->spec() +
                                   " is not implemented on the GPU yet (f32, f16, bf16, q8_0, "
                                   "q4_0, rot)");
    }
    if (f->kind == FormatKind::kRot && l.shape.head_dim > kRotMaxHeadDim) {
      return Status::Unimplemented("CUDA AppendKv: format " + f->spec() + " with head_dim " +
                                   std::to_string(l.shape.head_dim) + " (at most " +
                                   std::to_string(kRotMaxHeadDim) + " on the GPU)");
    }
  }
  if (layer >= l.shape.n_layers) {
    return Status::InvalidArgument("CUDA AppendKv: layer " + std::to_string(layer) + " of " +
                                   std::to_string(l.shape.n_layers));
  }
  if (static_cast<uint8_t>(src_dtype) > static_cast<uint8_t>(DType::kBF16)) {
    return Status::InvalidArgument("CUDA AppendKv: invalid source dtype");
  }
  if (n_tokens == 0) return Status::OK();
  if (!k || !v || !slot_mapping) return Status::InvalidArgument("CUDA AppendKv: null pointer");
  AppendArgs a;
  a.base = pool.base();
  a.block_stride = l.block_stride;
  a.k_off = l.k_offset(layer);
  a.v_off = l.v_offset(layer);
  a.k_token_stride = l.k_token_stride;
  a.v_token_stride = l.v_token_stride;
  a.k_row_bytes = l.k_row_bytes;
  a.v_row_bytes = l.v_row_bytes;
  a.block_tokens = l.block_tokens;
  a.n_kv_heads = l.shape.n_kv_heads;
  a.head_dim = l.shape.head_dim;
  a.k_kind = l.k_format.kind;
  a.v_kind = l.v_format.kind;
  a.k_dtype = l.k_format.scale_dtype;
  a.v_dtype = l.v_format.scale_dtype;
  a.src_dtype = src_dtype;
  a.k = k;
  a.v = v;
  a.slots = slot_mapping;
  RotConstsOf(l.k_format, &a.k_rot);
  RotConstsOf(l.v_format, &a.v_rot);
  AppendKernel<<<n_tokens, kAppendThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
  KVTIER_CUDA_RETURN(cudaGetLastError());
  return Status::OK();
}

// ---- test and benchmark helpers ----

namespace {

__device__ __forceinline__ uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void FillRandomKernel(void* dst, size_t n, DType t, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint64_t r = SplitMix(seed * 0x2545f4914f6cdd1dull + i);
    // Sum of four uniforms in [-0.5, 0.5): mean 0, variance 1/3; scaled to about unit variance.
    float s = 0;
    for (int j = 0; j < 4; ++j) s += static_cast<float>((r >> (16 * j)) & 0xffff) / 65536.0f - 0.5f;
    dev::StoreAs(t, dst, i, s * 1.7320508f * scale);
  }
}

}  // namespace

Status FillRandom(void* dst, size_t n, DType t, uint64_t seed, float scale) {
  if (n == 0) return Status::OK();
  FillRandomKernel<<<1024, 256>>>(dst, n, t, seed, scale);
  KVTIER_CUDA_RETURN(cudaGetLastError());
  return Status::OK();
}

__global__ void ReadThroughKernel(const uint4* p, size_t n, uint32_t* sink) {
  uint32_t x = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcg(p + i);
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (x == 0x9e3779b9u) *sink = x;  // keeps the loads; practically never taken
}

Status ReadThrough(const DeviceBuffer& b, void* stream) {
  if (b.size() < 32) return Status::OK();
  // The buffer's first 16 bytes double as the sink (it is read through, not kept).
  ReadThroughKernel<<<1024, 256, 0, static_cast<cudaStream_t>(stream)>>>(
      b.as<const uint4>() + 1, b.size() / 16 - 1, b.as<uint32_t>());
  KVTIER_CUDA_RETURN(cudaGetLastError());
  return Status::OK();
}

Result<double> TimeOnDevice(const std::function<Status()>& fn, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  cudaEvent_t e0, e1;
  KVTIER_CUDA_RETURN(cudaEventCreate(&e0));
  KVTIER_CUDA_RETURN(cudaEventCreate(&e1));
  cudaEventRecord(e0, s);
  Status st = fn();
  cudaEventRecord(e1, s);
  const cudaError_t e = cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  KVTIER_RETURN_IF_ERROR(st);
  KVTIER_CUDA_RETURN(e);
  return static_cast<double>(ms);
}

Result<double> MeasureCopyBandwidth(size_t bytes) {
  KVTIER_ASSIGN_OR_RETURN(DeviceBuffer a, DeviceBuffer::Allocate(bytes));
  KVTIER_ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Allocate(bytes));
  KVTIER_RETURN_IF_ERROR(a.Fill(1));
  cudaEvent_t e0, e1;
  KVTIER_CUDA_RETURN(cudaEventCreate(&e0));
  KVTIER_CUDA_RETURN(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int i = 0; i < 12; ++i) {
    cudaEventRecord(e0);
    cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    KVTIER_CUDA_RETURN(cudaEventSynchronize(e1));
    float t = 0;
    cudaEventElapsedTime(&t, e0, e1);
    if (i >= 2) ms.push_back(t);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ms.begin(), ms.end());
  return 2.0 * bytes / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

}  // namespace kvtier::cuda
