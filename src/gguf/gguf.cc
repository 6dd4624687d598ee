// GGUF: the ggml type table, value builders, GgufFile lifetime (mmap) and typed accessors.
// The parser is in gguf_reader.cc, the writer in gguf_writer.cc.
//
// Ownership: a GgufFile owns its mapping (munmap'ed in the destructor); FromMemory borrows.
// Thread safety: pure functions and const members of an immutable GgufFile; thread-safe.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <limits>

#include "kvtier/gguf.h"
#include "gguf/gguf_internal.h"

namespace kvtier {
namespace {

// Block geometry as ggml-common.h's block structs define it (checked against ggml_blck_size /
// ggml_type_size of a ggml build): type-0/1 legacy quants take 32 values, k-quants 256.
constexpr std::array<GgmlTypeInfo, 35> kGgmlTypes = {{
    {GgmlType::kF32, "f32", 1, 4},
    {GgmlType::kF16, "f16", 1, 2},
    {GgmlType::kQ4_0, "q4_0", 32, 18},   // f16 d + 16 nibble bytes
    {GgmlType::kQ4_1, "q4_1", 32, 20},   // f16 d, m + 16
    {GgmlType::kQ5_0, "q5_0", 32, 22},   // f16 d + 4 high bits + 16
    {GgmlType::kQ5_1, "q5_1", 32, 24},   // f16 d, m + 4 + 16
    {GgmlType::kQ8_0, "q8_0", 32, 34},   // f16 d + 32
    {GgmlType::kQ8_1, "q8_1", 32, 36},   // f16 d, s + 32
    {GgmlType::kQ2_K, "q2_K", 256, 84},  // 16 scales + 64 quants + f16 d, dmin
    {GgmlType::kQ3_K, "q3_K", 256, 110},  // 32 hmask + 64 quants + 12 scales + f16 d
    {GgmlType::kQ4_K, "q4_K", 256, 144},  // f16 d, dmin + 12 scales + 128 quants
    {GgmlType::kQ5_K, "q5_K", 256, 176},  // f16 d, dmin + 12 scales + 32 qh + 128 quants
    {GgmlType::kQ6_K, "q6_K", 256, 210},  // 128 ql + 64 qh + 16 scales + f16 d
    {GgmlType::kQ8_K, "q8_K", 256, 292},  // f32 d + 256 quants + 16 int16 bsums
    {GgmlType::kIQ2_XXS, "iq2_xxs", 256, 66},
    {GgmlType::kIQ2_XS, "iq2_xs", 256, 74},
    {GgmlType::kIQ3_XXS, "iq3_xxs", 256, 98},
    {GgmlType::kIQ1_S, "iq1_s", 256, 50},
    {GgmlType::kIQ4_NL, "iq4_nl", 32, 18},    // f16 d + 16 nibble bytes (non-linear codebook)
    {GgmlType::kIQ3_S, "iq3_s", 256, 110},
    {GgmlType::kIQ2_S, "iq2_s", 256, 82},
    {GgmlType::kIQ4_XS, "iq4_xs", 256, 136},  // f16 d + 2 + 4 scale bytes + 128 nibble bytes
    {GgmlType::kI8, "i8", 1, 1},
    {GgmlType::kI16, "i16", 1, 2},
    {GgmlType::kI32, "i32", 1, 4},
    {GgmlType::kI64, "i64", 1, 8},
    {GgmlType::kF64, "f64", 1, 8},
    {GgmlType::kIQ1_M, "iq1_m", 256, 56},
    {GgmlType::kBF16, "bf16", 1, 2},
    {GgmlType::kTQ1_0, "tq1_0", 256, 54},
    {GgmlType::kTQ2_0, "tq2_0", 256, 66},
    {GgmlType::kMXFP4, "mxfp4", 32, 17},
    {GgmlType::kNVFP4, "nvfp4", 64, 36},
    {GgmlType::kQ1_0, "q1_0", 128, 18},
    {GgmlType::kQ2_0, "q2_0", 64, 18},
}};

std::string TypeMismatch(const GgufFile& f, std::string_view key, std::string_view expected,
                         const GgufValue& v) {
  std::string got(GgufValueTypeName(v.type));
  if (v.type == GgufValueType::kArray) {
    const auto* a = std::get_if<std::shared_ptr<GgufArray>>(&v.v);
    if (a != nullptr && *a != nullptr) {
      got = std::string("array of ") + std::string(GgufValueTypeName((*a)->elem_type));
    }
  }
  return f.path() + ": key '" + std::string(key) + "': expected " + std::string(expected) +
         ", got " + got;
}

bool IsUnsigned(GgufValueType t) {
  return t == GgufValueType::kUint8 || t == GgufValueType::kUint16 ||
         t == GgufValueType::kUint32 || t == GgufValueType::kUint64;
}
bool IsSigned(GgufValueType t) {
  return t == GgufValueType::kInt8 || t == GgufValueType::kInt16 ||
         t == GgufValueType::kInt32 || t == GgufValueType::kInt64;
}

// Integer value as int64 / uint64; false when it is not an integer or does not fit.
bool ToInt64(const GgufValue& v, int64_t* out) {
  if (IsSigned(v.type)) {
    const auto* p = std::get_if<int64_t>(&v.v);
    if (p == nullptr) return false;
    *out = *p;
    return true;
  }
  if (IsUnsigned(v.type)) {
    const auto* p = std::get_if<uint64_t>(&v.v);
    if (p == nullptr || *p > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return false;
    }
    *out = static_cast<int64_t>(*p);
    return true;
  }
  return false;
}

const GgufArray* AsArray(const GgufValue& v) {
  if (v.type != GgufValueType::kArray) return nullptr;
  const auto* a = std::get_if<std::shared_ptr<GgufArray>>(&v.v);
  return a == nullptr ? nullptr : a->get();
}

}  // namespace

std::string_view GgufValueTypeName(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8: return "uint8";
    case GgufValueType::kInt8: return "int8";
    case GgufValueType::kUint16: return "uint16";
    case GgufValueType::kInt16: return "int16";
    case GgufValueType::kUint32: return "uint32";
    case GgufValueType::kInt32: return "int32";
    case GgufValueType::kFloat32: return "float32";
    case GgufValueType::kBool: return "bool";
    case GgufValueType::kString: return "string";
    case GgufValueType::kArray: return "array";
    case GgufValueType::kUint64: return "uint64";
    case GgufValueType::kInt64: return "int64";
    case GgufValueType::kFloat64: return "float64";
  }
  return "unknown";
}

const GgmlTypeInfo* FindGgmlType(uint32_t id) {
  for (const GgmlTypeInfo& t : kGgmlTypes) {
    if (static_cast<uint32_t>(t.type) == id) return &t;
  }
  return nullptr;
}

std::string GgmlTypeName(uint32_t id) {
  const GgmlTypeInfo* t = FindGgmlType(id);
  return t != nullptr ? std::string(t->name) : "type " + std::to_string(id);
}

GgufValue GgufUintValue(GgufValueType t, uint64_t v) { return GgufValue{t, v}; }
GgufValue GgufIntValue(GgufValueType t, int64_t v) { return GgufValue{t, v}; }
GgufValue GgufFloatValue(GgufValueType t, double v) { return GgufValue{t, v}; }
GgufValue GgufBoolValue(bool v) { return GgufValue{GgufValueType::kBool, v}; }
GgufValue GgufStringValue(std::string v) { return GgufValue{GgufValueType::kString, std::move(v)}; }
GgufValue GgufArrayValue(GgufValueType elem_type, std::vector<GgufValue> items) {
  auto a = std::make_shared<GgufArray>();
  a->elem_type = elem_type;
  a->items = std::move(items);
  return GgufValue{GgufValueType::kArray, std::move(a)};
}

Result<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError("open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::IOError("fstat " + path + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::InvalidArgument(path + ": not a regular file");
  }
  const size_t len = static_cast<size_t>(st.st_size);
  void* map = nullptr;
  if (len > 0) {
    map = ::mmap(nullptr, len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return Status::IOError("mmap " + path + ": " + std::strerror(err));
    }
  }
  ::close(fd);
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->map_ = map;
  f->map_len_ = len;
  f->bytes_ = std::span<const uint8_t>(static_cast<const uint8_t*>(map), len);
  KVTIER_RETURN_IF_ERROR(ParseGguf(f.get()));
  return f;
}

Result<std::unique_ptr<GgufFile>> GgufFile::FromMemory(std::span<const uint8_t> bytes,
                                                       std::string name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = std::move(name);
  f->bytes_ = bytes;
  KVTIER_RETURN_IF_ERROR(ParseGguf(f.get()));
  return f;
}

GgufFile::~GgufFile() {
  if (map_ != nullptr) ::munmap(map_, map_len_);
}

bool GgufFile::Has(std::string_view key) const { return metadata_.find(key) != metadata_.end(); }

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensor* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

#define KVTIER_GGUF_FIND_(v, key)                                                          \
  const GgufValue* v = Find(key);                                                          \
  if (v == nullptr) {                                                                      \
    return Status::NotFound(path_ + ": key '" + std::string(key) + "' not found");         \
  }

Result<std::string> GgufFile::GetString(std::string_view key) const {
  KVTIER_GGUF_FIND_(v, key);
  const auto* s = std::get_if<std::string>(&v->v);
  if (v->type != GgufValueType::kString || s == nullptr) {
    return Status::InvalidArgument(TypeMismatch(*this, key, "string", *v));
  }
  return *s;
}

Result<uint64_t> GgufFile::GetUint(std::string_view key) const {
  KVTIER_GGUF_FIND_(v, key);
  if (IsUnsigned(v->type)) {
    if (const auto* p = std::get_if<uint64_t>(&v->v)) return *p;
  }
  int64_t i = 0;
  if (!ToInt64(*v, &i) || i < 0) {
    return Status::InvalidArgument(TypeMismatch(*this, key, "a non-negative integer", *v));
  }
  return static_cast<uint64_t>(i);
}

Result<int64_t> GgufFile::GetInt(std::string_view key) const {
  KVTIER_GGUF_FIND_(v, key);
  int64_t i = 0;
  if (!ToInt64(*v, &i)) {
    return Status::InvalidArgument(TypeMismatch(*this, key, "an integer within int64", *v));
  }
  return i;
}

Result<double> GgufFile::GetFloat(std::string_view key) const {
  KVTIER_GGUF_FIND_(v, key);
  if (v->type == GgufValueType::kFloat32 || v->type == GgufValueType::kFloat64) {
    if (const auto* p = std::get_if<double>(&v->v)) return *p;
  }
  if (IsUnsigned(v->type)) {
    if (const auto* p = std::get_if<uint64_t>(&v->v)) return static_cast<double>(*p);
  }
  if (IsSigned(v->type)) {
    if (const auto* p = std::get_if<int64_t>(&v->v)) return static_cast<double>(*p);
  }
  return Status::InvalidArgument(TypeMismatch(*this, key, "a number", *v));
}

Result<bool> GgufFile::GetBool(std::string_view key) const {
  KVTIER_GGUF_FIND_(v, key);
  const auto* b = std::get_if<bool>(&v->v);
  if (v->type != GgufValueType::kBool || b == nullptr) {
    return Status::InvalidArgument(TypeMismatch(*this, key, "bool", *v));
  }
  return *b;
}

Result<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  KVTIER_GGUF_FIND_(v, key);
  const GgufArray* a = AsArray(*v);
  if (a == nullptr || a->elem_type != GgufValueType::kString) {
    return Status::InvalidArgument(TypeMismatch(*this, key, "array of string", *v));
  }
  std::vector<std::string> out;
  out.reserve(a->items.size());
  for (const GgufValue& item : a->items) {
    const auto* s = std::get_if<std::string>(&item.v);
    out.push_back(s != nullptr ? *s : std::string());
  }
  return out;
}

Result<std::vector<float>> GgufFile::GetFloatArray(std::string_view key) const {
  KVTIER_GGUF_FIND_(v, key);
  const GgufArray* a = AsArray(*v);
  if (a == nullptr || (a->elem_type != GgufValueType::kFloat32 &&
                       a->elem_type != GgufValueType::kFloat64 && !IsSigned(a->elem_type) &&
                       !IsUnsigned(a->elem_type))) {
    return Status::InvalidArgument(TypeMismatch(*this, key, "array of float32", *v));
  }
  std::vector<float> out;
  out.reserve(a->items.size());
  for (const GgufValue& item : a->items) {
    float f = 0.0f;
    if (const auto* d = std::get_if<double>(&item.v)) {
      f = static_cast<float>(*d);
    } else if (const auto* u = std::get_if<uint64_t>(&item.v)) {
      f = static_cast<float>(*u);
    } else if (const auto* i = std::get_if<int64_t>(&item.v)) {
      f = static_cast<float>(*i);
    }
    out.push_back(f);
  }
  return out;
}

Result<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  KVTIER_GGUF_FIND_(v, key);
  const GgufArray* a = AsArray(*v);
  if (a == nullptr || (!IsSigned(a->elem_type) && !IsUnsigned(a->elem_type))) {
    return Status::InvalidArgument(TypeMismatch(*this, key, "array of integers", *v));
  }
  std::vector<int64_t> out;
  out.reserve(a->items.size());
  for (size_t i = 0; i < a->items.size(); ++i) {
    int64_t x = 0;
    if (!ToInt64(a->items[i], &x)) {
      return Status::InvalidArgument(path_ + ": key '" + std::string(key) + "' item " +
                                     std::to_string(i) + ": does not fit in int64");
    }
    out.push_back(x);
  }
  return out;
}

#undef KVTIER_GGUF_FIND_

}  // namespace kvtier
