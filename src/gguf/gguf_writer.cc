// GgufWriter: encodes metadata and tensor infos as GGUF v3 and writes the file atomically
// (temporary name, fsync, rename, fsync of the directory).
//
// Ownership: the writer owns copies of every value and tensor byte given to it.
// Thread safety: thread-compatible.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "kvtier/gguf.h"

namespace kvtier {
namespace {

constexpr uint64_t kDefaultAlignment = 32;

template <typename T>
void Put(std::vector<uint8_t>* out, T v) {
  const size_t at = out->size();
  out->resize(at + sizeof(T));
  std::memcpy(out->data() + at, &v, sizeof(T));
}

void PutString(std::vector<uint8_t>* out, std::string_view s) {
  Put<uint64_t>(out, s.size());
  const size_t at = out->size();
  out->resize(at + s.size());
  if (!s.empty()) std::memcpy(out->data() + at, s.data(), s.size());
}

uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// The value's variant read as what its type stores; a mismatch reads as zero.
uint64_t AsU64(const GgufValue& v) {
  if (const auto* p = std::get_if<uint64_t>(&v.v)) return *p;
  if (const auto* p = std::get_if<int64_t>(&v.v)) return static_cast<uint64_t>(*p);
  if (const auto* p = std::get_if<bool>(&v.v)) return *p ? 1 : 0;
  return 0;
}
double AsF64(const GgufValue& v) {
  if (const auto* p = std::get_if<double>(&v.v)) return *p;
  return 0.0;
}

void PutValue(std::vector<uint8_t>* out, GgufValueType t, const GgufValue& v) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8: Put<uint8_t>(out, static_cast<uint8_t>(AsU64(v))); return;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16: Put<uint16_t>(out, static_cast<uint16_t>(AsU64(v))); return;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32: Put<uint32_t>(out, static_cast<uint32_t>(AsU64(v))); return;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64: Put<uint64_t>(out, AsU64(v)); return;
    case GgufValueType::kFloat32: Put<float>(out, static_cast<float>(AsF64(v))); return;
    case GgufValueType::kFloat64: Put<double>(out, AsF64(v)); return;
    case GgufValueType::kBool: {
      const auto* b = std::get_if<bool>(&v.v);
      Put<uint8_t>(out, b != nullptr && *b ? 1 : 0);
      return;
    }
    case GgufValueType::kString: {
      const auto* s = std::get_if<std::string>(&v.v);
      PutString(out, s != nullptr ? std::string_view(*s) : std::string_view());
      return;
    }
    case GgufValueType::kArray: {
      const auto* a = std::get_if<std::shared_ptr<GgufArray>>(&v.v);
      if (a == nullptr || *a == nullptr) {
        Put<uint32_t>(out, static_cast<uint32_t>(GgufValueType::kUint8));
        Put<uint64_t>(out, 0);
        return;
      }
      Put<uint32_t>(out, static_cast<uint32_t>((*a)->elem_type));
      Put<uint64_t>(out, (*a)->items.size());
      for (const GgufValue& item : (*a)->items) PutValue(out, (*a)->elem_type, item);
      return;
    }
  }
}

Status WriteAll(int fd, const uint8_t* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::IOError("write " + path + ": " + std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::OK();
}

}  // namespace

void GgufWriter::SetValue(std::string key, GgufValue v) {
  for (auto& kv : kv_) {
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  }
  kv_.emplace_back(std::move(key), std::move(v));
}

void GgufWriter::SetUint32(std::string key, uint32_t v) {
  SetValue(std::move(key), GgufUintValue(GgufValueType::kUint32, v));
}
void GgufWriter::SetInt32(std::string key, int32_t v) {
  SetValue(std::move(key), GgufIntValue(GgufValueType::kInt32, v));
}
void GgufWriter::SetUint64(std::string key, uint64_t v) {
  SetValue(std::move(key), GgufUintValue(GgufValueType::kUint64, v));
}
void GgufWriter::SetFloat32(std::string key, float v) {
  SetValue(std::move(key), GgufFloatValue(GgufValueType::kFloat32, v));
}
void GgufWriter::SetBool(std::string key, bool v) { SetValue(std::move(key), GgufBoolValue(v)); }
void GgufWriter::SetString(std::string key, std::string v) {
  SetValue(std::move(key), GgufStringValue(std::move(v)));
}
void GgufWriter::SetStringArray(std::string key, std::vector<std::string> v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (std::string& s : v) items.push_back(GgufStringValue(std::move(s)));
  SetValue(std::move(key), GgufArrayValue(GgufValueType::kString, std::move(items)));
}
void GgufWriter::SetFloat32Array(std::string key, std::vector<float> v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (float f : v) items.push_back(GgufFloatValue(GgufValueType::kFloat32, f));
  SetValue(std::move(key), GgufArrayValue(GgufValueType::kFloat32, std::move(items)));
}
void GgufWriter::SetInt32Array(std::string key, std::vector<int32_t> v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (int32_t i : v) items.push_back(GgufIntValue(GgufValueType::kInt32, i));
  SetValue(std::move(key), GgufArrayValue(GgufValueType::kInt32, std::move(items)));
}

Status GgufWriter::AddTensor(std::string name, GgmlType type, std::vector<uint64_t> shape,
                             std::vector<uint8_t> bytes) {
  const std::string what = "GgufWriter::AddTensor '" + name + "'";
  if (name.empty()) return Status::InvalidArgument("GgufWriter::AddTensor: empty name");
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) return Status::InvalidArgument(what + ": duplicate tensor name");
  }
  const GgmlTypeInfo* info = FindGgmlType(static_cast<uint32_t>(type));
  if (info == nullptr) {
    return Status::InvalidArgument(what + ": unsupported tensor type " +
                                   std::to_string(static_cast<uint32_t>(type)));
  }
  if (shape.empty() || shape.size() > 4) {
    return Status::InvalidArgument(what + ": expected 1..4 dimensions, got " +
                                   std::to_string(shape.size()));
  }
  uint64_t n = 1;
  for (uint64_t d : shape) {
    if (d == 0 || n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / d) {
      return Status::InvalidArgument(what + ": dimensions must be positive and their product "
                                            "fit in int64");
    }
    n *= d;
  }
  if (shape[0] % info->block_values != 0) {
    return Status::InvalidArgument(what + ": dim 0 (" + std::to_string(shape[0]) +
                                   ") is not a multiple of the " + std::string(info->name) +
                                   " block size " + std::to_string(info->block_values));
  }
  const uint64_t n_bytes = n / info->block_values * info->block_bytes;
  if (bytes.size() != n_bytes) {
    return Status::InvalidArgument(what + ": expected " + std::to_string(n_bytes) +
                                   " bytes of " + std::string(info->name) + ", got " +
                                   std::to_string(bytes.size()));
  }
  tensors_.push_back(PendingTensor{std::move(name), type, std::move(shape), std::move(bytes)});
  return Status::OK();
}

std::vector<uint8_t> GgufWriter::EncodeHeader() const {
  std::vector<uint8_t> out;
  out.reserve(4096);
  Put<uint32_t>(&out, 0x46554747u);  // "GGUF" little-endian
  Put<uint32_t>(&out, 3);
  Put<uint64_t>(&out, tensors_.size());
  // general.alignment follows set_alignment(): written when it is not the default or when the
  // caller set the key, always as uint32.
  bool has_alignment_key = false;
  for (const auto& kv : kv_) has_alignment_key |= kv.first == "general.alignment";
  const bool write_alignment = has_alignment_key || alignment_ != kDefaultAlignment;
  Put<uint64_t>(&out, kv_.size() + (write_alignment && !has_alignment_key ? 1 : 0));
  for (const auto& [key, value] : kv_) {
    PutString(&out, key);
    if (key == "general.alignment") {
      Put<uint32_t>(&out, static_cast<uint32_t>(GgufValueType::kUint32));
      Put<uint32_t>(&out, static_cast<uint32_t>(alignment_));
      continue;
    }
    Put<uint32_t>(&out, static_cast<uint32_t>(value.type));
    PutValue(&out, value.type, value);
  }
  if (write_alignment && !has_alignment_key) {
    PutString(&out, "general.alignment");
    Put<uint32_t>(&out, static_cast<uint32_t>(GgufValueType::kUint32));
    Put<uint32_t>(&out, static_cast<uint32_t>(alignment_));
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    PutString(&out, t.name);
    Put<uint32_t>(&out, static_cast<uint32_t>(t.shape.size()));
    for (uint64_t d : t.shape) Put<uint64_t>(&out, d);
    Put<uint32_t>(&out, static_cast<uint32_t>(t.type));
    Put<uint64_t>(&out, offset);
    offset += AlignUp(t.bytes.size(), alignment_);
  }
  out.resize(AlignUp(out.size(), alignment_), 0);
  return out;
}

std::vector<uint8_t> GgufWriter::Serialize() const {
  std::vector<uint8_t> out = EncodeHeader();
  for (const PendingTensor& t : tensors_) {
    out.insert(out.end(), t.bytes.begin(), t.bytes.end());
    out.resize(AlignUp(out.size(), alignment_), 0);
  }
  return out;
}

Status GgufWriter::WriteFile(const std::string& path) const {
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0 || alignment_ > (1u << 30)) {
    return Status::InvalidArgument("GgufWriter: alignment must be a power of two up to 2^30, got " +
                                   std::to_string(alignment_));
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IOError("open " + tmp + ": " + std::strerror(errno));
  auto fail = [&](Status s) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  const std::vector<uint8_t> header = EncodeHeader();
  Status s = WriteAll(fd, header.data(), header.size(), tmp);
  if (!s.ok()) return fail(std::move(s));
  const std::vector<uint8_t> zeros(alignment_, 0);
  for (const PendingTensor& t : tensors_) {
    s = WriteAll(fd, t.bytes.data(), t.bytes.size(), tmp);
    if (!s.ok()) return fail(std::move(s));
    const size_t pad = AlignUp(t.bytes.size(), alignment_) - t.bytes.size();
    s = WriteAll(fd, zeros.data(), pad, tmp);
    if (!s.ok()) return fail(std::move(s));
  }
  if (::fsync(fd) != 0) return fail(Status::IOError("fsync " + tmp + ": " + std::strerror(errno)));
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status::IOError("close " + tmp + ": " + std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Status::IOError("rename " + tmp + " to " + path + ": " + std::strerror(err));
  }
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string(".")
                          : slash == 0               ? std::string("/")
                                                     : path.substr(0, slash);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    const int rc = ::fsync(dfd);
    const int err = errno;
    ::close(dfd);
    if (rc != 0) return Status::IOError("fsync " + dir + ": " + std::strerror(err));
  }
  return Status::OK();
}

}  // namespace kvtier
