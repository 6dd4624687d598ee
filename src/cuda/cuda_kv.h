// The CUDA backend's KV cache and attention (issue 35). Host-side API: this header
// needs no CUDA headers, so plain C++ (tests, the benchmark, later the engine) can include it.
//
// DevicePool: the same blocks as BlockPool (KvBlockLayout: [n_layers] x {K rows, V rows}, each
// region padded to 64 bytes, blocks padded to 4 KiB, the same format ids and row layouts of
// src/quant), in one cudaMalloc'd range, so a block moves between HBM, host RAM and SSD as the
// same bytes. Block b starts at base + b * block_stride; View() fills a PagedKvView with device
// pointers (its rows and block tables must then be device memory too).
//
// AppendKv: quantize-on-append. K and V of n_tokens tokens (all KV heads, f32/f16/bf16 on the
// device) are converted into the pool's formats and written to their slots. The bytes equal the
// CPU reference quantizer's (src/quant/quant_ref.cc) bit for bit: f16, bf16, q8_0, q4_0 and
// the rotated rot<bits>s<seed> rows (head_dim up to 256; rot.cuh).
//
// DecodeAttention: one query token per row (decode) over a device PagedKvView, split-K over the
// row's keys with a log-sum-exp merge, a KV head's rows read once for all of its query heads
// (GQA), window and soft-cap as in kvtier/attention.h. K and V in the same format (f16, bf16,
// q8_0, q4_0), read in place; head_dim 64, 128, 256; f32 query and output. Tensor cores
// (mma.sync) by default: a thread block over up to 8 KV heads of a token range where the view
// allows and the batch has several rows (decode_wide.cuh), else one per KV head
// (decode_mma.cuh); DecodeOptions::exact selects the f32 kernel. The splits of a row merge in
// the last thread block to finish (no second launch). rot4 rows (rot4s<seed>): q rotated once
// per head, the all-heads tensor-core kernel (or the f32 one: exact, or a view the all-heads
// one cannot take) reads the rows in the rotated basis, out rotated back once per head
// (DecodeWorkspace::rotated holds the rotated queries).
//
// Every function returns a Status naming what failed (a CUDA error names the call and the
// runtime's message). Not thread-safe per pool; distinct pools and streams are independent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/attention.h"
#include "kvtier/block_pool.h"
#include "kvtier/format.h"
#include "kvtier/kv_types.h"
#include "kvtier/paged_kv_view.h"
#include "kvtier/status.h"

namespace kvtier::cuda {

// True if a CUDA device can be used (a driver, a device, a context); otherwise false, with the
// reason in *why when it is given.
bool DeviceAvailable(std::string* why = nullptr);
// "NVIDIA H100 80GB HBM3, sm_90, 132 SMs, 79.1 GiB" of the current device.
std::string DeviceDescription();

// An owned cudaMalloc'd buffer (never managed memory).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  static Result<DeviceBuffer> Allocate(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t size() const { return bytes_; }
  Status CopyFromHost(const void* src, size_t bytes, size_t offset = 0);
  Status CopyToHost(void* dst, size_t bytes, size_t offset = 0) const;
  Status Fill(uint8_t value);

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

Status Synchronize();

class DevicePool {
 public:
  // A pool of n_blocks blocks (all zero bytes).
  static Result<std::unique_ptr<DevicePool>> Create(const KvShape& shape, const Format& k_format,
                                                    const Format& v_format, uint32_t block_tokens,
                                                    uint32_t n_blocks);
  const KvBlockLayout& layout() const { return layout_; }
  uint32_t capacity_blocks() const { return n_blocks_; }
  uint8_t* base() const { return mem_.as<uint8_t>(); }
  size_t bytes() const { return static_cast<size_t>(n_blocks_) * layout_.block_stride; }
  uint8_t* block_data(BlockId id) const {
    return base() + static_cast<size_t>(id) * layout_.block_stride;
  }

  // Hands out n free blocks (all or nothing; ResourceExhausted names the numbers).
  Status Allocate(size_t n, std::vector<BlockId>* out);
  void Free(const std::vector<BlockId>& ids);

  // A view of `layer` over rows in device memory (rows and their block tables).
  PagedKvView View(uint32_t layer, const PagedKvRow* dev_rows, uint32_t n_rows) const;

  // Whole blocks between the pool and host memory (the next tier's unit).
  Status CopyBlockToHost(BlockId id, void* dst) const;
  Status CopyBlockFromHost(BlockId id, const void* src);

 private:
  DevicePool(const KvBlockLayout& layout, uint32_t n_blocks, DeviceBuffer mem);
  KvBlockLayout layout_;
  uint32_t n_blocks_;
  DeviceBuffer mem_;
  std::vector<BlockId> free_;  // LIFO
};

// Quantize-on-append of one layer: k and v are device arrays [n_tokens, n_kv_heads, head_dim]
// of src_dtype; token i goes to slot slot_mapping[i] % block_tokens of block
// slot_mapping[i] / block_tokens (slot_mapping: device int64 [n_tokens]; a negative entry
// skips that token). `stream` is a cudaStream_t (null: the default stream).
Status AppendKv(const DevicePool& pool, uint32_t layer, DType src_dtype, const void* k,
                const void* v, const int64_t* slot_mapping, uint32_t n_tokens,
                void* stream = nullptr);

// Scratch memory for the split-K partial results, reused across calls (grows as needed).
// counters: the fused merge's tickets (zero between calls).
struct DecodeWorkspace {
  DeviceBuffer partial;
  DeviceBuffer counters;
  DeviceBuffer rotated;  // rot4 rows: the rotated queries
};

struct DecodeOptions {
  // An upper bound of the rows' lengths (the host knows them; the view's rows are on the
  // device). Used to choose the split; a row longer than this is still right, only slower.
  uint32_t max_length = 0;
  // Key ranges a row is split into: 0 = chosen from the shape and the device, else this many.
  uint32_t n_splits = 0;
  // The f32 kernel (every product and sum in f32; relative error ~1e-7 against the float64
  // reference) instead of the tensor-core one (Q and P as hi + lo 16-bit pairs: ~1e-6 for f16
  // and bf16 K/V; q8_0 / q4_0 V rows rounded once to f16: ~1e-4).
  bool exact = false;
  // The per-KV-head tensor-core kernel even where the all-heads one applies (for comparisons);
  // all_heads: the all-heads one wherever it applies, also for a single row (for tests).
  bool per_head = false;
  bool all_heads = false;
  // KV heads per thread block of the all-heads kernel (2, 4 or 8; 0: chosen with the split).
  uint32_t heads_per_block = 0;
  // Merge the splits in a second launch instead of in the last thread block of each (row,
  // KV-head group) (for comparisons; the f32 kernel always does).
  bool separate_merge = false;
  // 0: the all-heads kernel's default variant everywhere (q4_0 x4 at 3 stages also for several
  // rows, for comparisons); else the measured choice.
  uint32_t wide_variant = 1;
  void* stream = nullptr;  // cudaStream_t
};

// Decode attention: q device f32 [n_rows, n_heads, head_dim] (one query per row, at position
// length - 1, attending keys [max(0, length - window), length)), out device f32 of the same
// shape. Same scale / softcap / window meaning as kvtier::Attention; out_dtype must be f32.
// Unimplemented for K and V formats that differ, affine, or another head_dim.
Status DecodeAttention(const PagedKvView& kv, const float* q, const AttentionParams& params,
                       float* out, const DecodeOptions& options, DecodeWorkspace* ws);

// The split DecodeAttention would choose for a pool's packed view (the benchmark's report),
// at `group` query heads per KV head.
uint32_t ChooseSplits(uint32_t n_rows, uint32_t n_kv_heads, uint32_t max_length,
                      const Format& format, uint32_t head_dim,
                      const DecodeOptions& options = DecodeOptions(), uint32_t group = 4);
// The kernel it would run: "all-heads x8", "per-head" or "f32".
std::string ChooseKernelName(uint32_t n_rows, uint32_t n_kv_heads, uint32_t max_length,
                             const Format& format, uint32_t head_dim,
                             const DecodeOptions& options = DecodeOptions(), uint32_t group = 4);

// Fills a device buffer with `n` values of dtype `t`, normal-ish (sum of uniforms), scaled by
// `scale`, from `seed` (for tests and the benchmark; deterministic).
Status FillRandom(void* dst, size_t n, DType t, uint64_t seed, float scale = 1.0f);

// Reads every 16-byte word of `b` (bytes a multiple of 16) on `stream`: after a Fill, an L2
// flush that leaves clean lines, so the next kernel does not pay for writing back dirty ones.
Status ReadThrough(const DeviceBuffer& b, void* stream = nullptr);

// Milliseconds of device time that fn's work takes on `stream` (events around it; waits).
Result<double> TimeOnDevice(const std::function<Status()>& fn, void* stream = nullptr);

// Device-to-device copy bandwidth in GB/s (bytes read + written) over `bytes` of memory.
Result<double> MeasureCopyBandwidth(size_t bytes);

}  // namespace kvtier::cuda
