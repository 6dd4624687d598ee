// Module gguf (src/gguf, kvtier_gguf; order and include rule: docs/architecture.md) owns GGUF v3
// files: the validating reader and the writer.
//
// GGUF v3 files (ggml's model format): a validating reader over an mmap'ed file and a writer.
//
// The reader checks every count, length, offset, size and type against the file before it
// touches the bytes they describe: a truncated or corrupt file is an error that names the field
// and its byte offset, never a crash. Tensor data is not copied: GgufTensor::data points into
// the mapping, which lives as long as the GgufFile. Versions 3 and 2 (same layout) are read.
// Limits beyond the spec's: 1..4 dims, keys and names up to 65535 bytes, arrays nested 8 deep,
// 2^24 array items in all (ResourceExhausted past it, which bounds memory use). Codes:
// InvalidArgument for what kvtier does not support (version, big-endian, tensor type),
// Corruption for anything inconsistent, IOError for open / mmap failures.
//
// Thread safety: a GgufFile is immutable after Open(); any number of threads may read it.
// A GgufWriter is thread-compatible (one thread at a time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

// Metadata value types, as numbered in the GGUF spec (stored in files: never change).
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
std::string_view GgufValueTypeName(GgufValueType t);

// Tensor types, as numbered by ggml (stored in files: never change): every type ggml defines
// (ngxson/llama.cpp 3f545be), so a file of a type kvtier cannot compute with still parses and
// the model loader names the type; an id not listed here is reported by its number.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  kMXFP4 = 39,
  kNVFP4 = 40,
  kQ1_0 = 41,
  kQ2_0 = 42,
};

// Block geometry of a ggml tensor type: `block_values` values take `block_bytes` bytes.
struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;  // "f32", "q4_0", "q6_K", ... (ggml's names)
  uint32_t block_values;
  uint32_t block_bytes;
};
// nullptr for an id that is not a ggml type kvtier knows the geometry of.
const GgmlTypeInfo* FindGgmlType(uint32_t id);
// "q4_K" or "type 99" for unknown ids.
std::string GgmlTypeName(uint32_t id);

struct GgufArray;
// One metadata value. Integers keep their signedness in the variant; the accessors of GgufFile
// convert between integer widths when the value fits and otherwise return an error.
struct GgufValue {
  GgufValueType type = GgufValueType::kUint32;
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<GgufArray>> v;
};
struct GgufArray {
  GgufValueType elem_type = GgufValueType::kUint32;
  std::vector<GgufValue> items;
};

// Value builders (the writer and tests). Integer and float types take the value in the
// variant that type reads back as: unsigned types uint64_t, signed int64_t, floats double.
GgufValue GgufUintValue(GgufValueType t, uint64_t v);  // kUint8 / 16 / 32 / 64
GgufValue GgufIntValue(GgufValueType t, int64_t v);    // kInt8 / 16 / 32 / 64
GgufValue GgufFloatValue(GgufValueType t, double v);   // kFloat32 / kFloat64
GgufValue GgufBoolValue(bool v);
GgufValue GgufStringValue(std::string v);
GgufValue GgufArrayValue(GgufValueType elem_type, std::vector<GgufValue> items);

struct GgufTensor {
  std::string name;
  std::vector<uint64_t> shape;  // ggml order: shape[0] is the innermost (contiguous) dimension
  uint32_t type = 0;            // GgmlType id
  uint64_t offset = 0;          // from the start of the data section
  uint64_t n_values = 0;        // product of shape
  uint64_t n_bytes = 0;         // n_values / block_values * block_bytes
  // Inside the mapping; aligned to the file's alignment for Open() (page-aligned mapping), at
  // the same offset from the buffer's start for FromMemory().
  const uint8_t* data = nullptr;
};

class GgufFile {
 public:
  // Maps and validates `path`. Errors name the file, the field and its byte offset.
  static Result<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Validates an in-memory image (not copied: `bytes` must outlive the result). `name` is used
  // in error messages. Used by the fuzz target and tests.
  static Result<std::unique_ptr<GgufFile>> FromMemory(std::span<const uint8_t> bytes,
                                                      std::string name);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_bytes() const { return bytes_.size(); }

  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
  bool Has(std::string_view key) const;
  const GgufValue* Find(std::string_view key) const;

  // Typed accessors: NotFound if the key is absent, InvalidArgument naming the key, the
  // expected and the actual type when it has another type (or an integer does not fit).
  Result<std::string> GetString(std::string_view key) const;
  Result<uint64_t> GetUint(std::string_view key) const;   // any integer type, >= 0
  Result<int64_t> GetInt(std::string_view key) const;     // any integer type
  Result<double> GetFloat(std::string_view key) const;    // f32 / f64 (and integers)
  Result<bool> GetBool(std::string_view key) const;
  Result<std::vector<std::string>> GetStringArray(std::string_view key) const;
  Result<std::vector<float>> GetFloatArray(std::string_view key) const;
  Result<std::vector<int64_t>> GetIntArray(std::string_view key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  // nullptr if there is no tensor of that name.
  const GgufTensor* FindTensor(std::string_view name) const;

 private:
  GgufFile() = default;
  friend class GgufParser;

  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::span<const uint8_t> bytes_;
  void* map_ = nullptr;  // munmap'ed in the destructor when Open() mapped the file
  size_t map_len_ = 0;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Builds a GGUF v3 file in memory and writes it (temporary name, fsync, rename).
class GgufWriter {
 public:
  void SetUint32(std::string key, uint32_t v);
  void SetInt32(std::string key, int32_t v);
  void SetUint64(std::string key, uint64_t v);
  void SetFloat32(std::string key, float v);
  void SetBool(std::string key, bool v);
  void SetString(std::string key, std::string v);
  void SetStringArray(std::string key, std::vector<std::string> v);
  void SetFloat32Array(std::string key, std::vector<float> v);
  void SetInt32Array(std::string key, std::vector<int32_t> v);
  void SetValue(std::string key, GgufValue v);  // any value, arrays of arrays included
  // `shape` in ggml order; `bytes` must hold exactly the tensor's n_bytes. InvalidArgument on a
  // duplicate name, an unknown type, a shape the block size does not divide, or a size mismatch.
  Status AddTensor(std::string name, GgmlType type, std::vector<uint64_t> shape,
                   std::vector<uint8_t> bytes);
  void set_alignment(uint64_t a) { alignment_ = a; }

  // The whole file image. A value whose variant does not hold what its type reads back as
  // is written as that type's zero (empty string, empty array). Precondition: the alignment
  // is a power of two (WriteFile checks it).
  std::vector<uint8_t> Serialize() const;
  // Writes `path` + ".tmp.<pid>", fsyncs it, renames it over `path`, fsyncs the directory.
  // Tensor bytes are written from the pending tensors (no second copy of the file in memory).
  Status WriteFile(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> shape;
    std::vector<uint8_t> bytes;
  };
  // Header, metadata, tensor infos and the padding up to the data section.
  std::vector<uint8_t> EncodeHeader() const;

  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> kv_;  // in insertion order
  std::vector<PendingTensor> tensors_;
};

}  // namespace kvtier
