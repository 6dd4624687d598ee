// GGUF parser: validates every count, length, offset, size and type of a GGUF v3 (or v2)
// image against its size before reading what they describe, and fills a GgufFile.
//
// Layout (little-endian): "GGUF", u32 version, u64 tensor count, u64 kv count; kv pairs
// (string key, u32 value type, value); tensor infos (string name, u32 n_dims, u64 dims[n_dims],
// u32 ggml type, u64 offset); padding to general.alignment (default 32); tensor data, each
// tensor at data_start + offset. A string is a u64 length and that many bytes; an array a u32
// element type, a u64 count and the elements.
//
// Ownership: the parser borrows the GgufFile and its bytes for the duration of ParseGguf.
// Thread safety: one parser per file; no shared state.
#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <sstream>

#include "base/strings.h"
#include "gguf/gguf_internal.h"

namespace kvtier {
namespace {

constexpr uint32_t kMaxArrayDepth = 8;            // arrays of arrays of ... (spec: any depth)
constexpr uint64_t kMaxMetadataValues = 1u << 24;  // array items in all, bounds memory use
constexpr uint64_t kMaxNameBytes = 65535;          // keys and tensor names (spec: 65535)
constexpr uint32_t kMaxDims = 4;                   // GGML_MAX_DIMS
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;        // empty key, type, smallest value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, 1 dim, type, offset

bool KnownValueType(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::kFloat64); }

// Fewest bytes one value of type t takes in a file.
uint64_t MinValueBytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool: return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16: return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32: return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
    case GgufValueType::kString: return 8;  // string: its u64 length
    case GgufValueType::kArray: return 12;  // u32 element type + u64 count
  }
  return 1;
}

// A name from the file, safe to print: printable ASCII, others as \xNN, at most 80 bytes.
std::string Printable(std::string_view s) {
  std::string out;
  const size_t n = std::min<size_t>(s.size(), 80);
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'') {
      out.push_back(static_cast<char>(c));
    } else {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  if (s.size() > n) out += "...";
  return out;
}

// Where a value sits, rendered only when an error needs it:
// "<parent> <label>[ <index>][ '<name>']", e.g. "tensor 3 'blk.0.attn_q.weight' offset".
struct Field {
  const Field* parent = nullptr;
  const char* label = "";
  std::string_view name = {};
  bool has_name = false;
  uint64_t index = 0;
  bool has_index = false;

  std::string Render() const {
    std::string s = parent != nullptr ? parent->Render() + " " : std::string();
    s += label;
    if (has_index) {
      s += ' ';
      s += std::to_string(index);
    }
    if (has_name) s += std::string(" '") + Printable(name) + "'";
    return s;
  }
};
Field Leaf(const char* label) { return Field{nullptr, label}; }
Field Child(const Field& parent, const char* label) { return Field{&parent, label}; }
Field Indexed(const Field* parent, const char* label, uint64_t i) {
  return Field{parent, label, {}, false, i, true};
}

}  // namespace

class GgufParser {
 public:
  explicit GgufParser(GgufFile* f) : f_(f), b_(f->bytes_) {}

  Status Parse() {
    KVTIER_RETURN_IF_ERROR(ParseHeader());
    KVTIER_RETURN_IF_ERROR(ParseMetadata());
    KVTIER_RETURN_IF_ERROR(ParseAlignment());
    KVTIER_RETURN_IF_ERROR(ParseTensorInfos());
    return PlaceTensorData();
  }

 private:
  Status Err(const Field& field, uint64_t at, const std::string& what,
             StatusCode code = StatusCode::kCorruption) const {
    std::ostringstream m;
    m << f_->path_ << ": " << field.Render() << " at byte " << at << ": " << what;
    return Status(code, m.str());
  }

  uint64_t Left() const { return b_.size() - pos_; }

  Status Need(uint64_t n, const Field& field) const {
    if (n <= Left()) return Status::OK();
    return Err(field, pos_,
               "needs " + std::to_string(n) + " bytes, the file (" + GroupDigits(b_.size()) +
                   " bytes) has " + std::to_string(Left()) + " left");
  }

  template <typename T>
  Status Read(T* v, const Field& field) {
    KVTIER_RETURN_IF_ERROR(Need(sizeof(T), field));
    std::memcpy(v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::OK();
  }

  Status ReadString(std::string* s, const Field& field, uint64_t max_len) {
    const uint64_t at = pos_;
    uint64_t len = 0;
    KVTIER_RETURN_IF_ERROR(Read(&len, field));
    if (len > max_len) {
      return Err(field, at,
                 "length " + std::to_string(len) + " exceeds the limit " + std::to_string(max_len));
    }
    if (len > Left()) {
      return Err(field, at,
                 "string length " + std::to_string(len) + " runs past the end of the file (" +
                     std::to_string(Left()) + " bytes left)");
    }
    s->assign(reinterpret_cast<const char*>(b_.data() + pos_), static_cast<size_t>(len));
    pos_ += len;
    return Status::OK();
  }

  Status ReadValueType(GgufValueType* t, const Field& field) {
    const uint64_t at = pos_;
    uint32_t raw = 0;
    KVTIER_RETURN_IF_ERROR(Read(&raw, field));
    if (!KnownValueType(raw)) {
      return Err(field, at, "expected a value type 0..12, got " + std::to_string(raw));
    }
    *t = static_cast<GgufValueType>(raw);
    return Status::OK();
  }

  template <typename T, typename Stored>
  Status ReadScalar(GgufValue* out, const Field& field) {
    T x{};
    KVTIER_RETURN_IF_ERROR(Read(&x, field));
    out->v = static_cast<Stored>(x);
    return Status::OK();
  }

  Status ReadValue(GgufValueType t, const Field& field, uint32_t depth, GgufValue* out) {
    out->type = t;
    switch (t) {
      case GgufValueType::kUint8: return ReadScalar<uint8_t, uint64_t>(out, field);
      case GgufValueType::kInt8: return ReadScalar<int8_t, int64_t>(out, field);
      case GgufValueType::kUint16: return ReadScalar<uint16_t, uint64_t>(out, field);
      case GgufValueType::kInt16: return ReadScalar<int16_t, int64_t>(out, field);
      case GgufValueType::kUint32: return ReadScalar<uint32_t, uint64_t>(out, field);
      case GgufValueType::kInt32: return ReadScalar<int32_t, int64_t>(out, field);
      case GgufValueType::kUint64: return ReadScalar<uint64_t, uint64_t>(out, field);
      case GgufValueType::kInt64: return ReadScalar<int64_t, int64_t>(out, field);
      case GgufValueType::kFloat32: return ReadScalar<float, double>(out, field);
      case GgufValueType::kFloat64: return ReadScalar<double, double>(out, field);
      case GgufValueType::kBool: {
        const uint64_t at = pos_;
        uint8_t x = 0;
        KVTIER_RETURN_IF_ERROR(Read(&x, field));
        if (x > 1) return Err(field, at, "expected a bool 0 or 1, got " + std::to_string(x));
        out->v.emplace<bool>(x == 1);
        return Status::OK();
      }
      case GgufValueType::kString: {
        std::string s;
        KVTIER_RETURN_IF_ERROR(ReadString(&s, field, std::numeric_limits<uint64_t>::max()));
        out->v = std::move(s);
        return Status::OK();
      }
      case GgufValueType::kArray: return ReadArray(field, depth, out);
    }
    return Err(field, pos_, "unknown value type", StatusCode::kInternal);
  }

  Status ReadArray(const Field& field, uint32_t depth, GgufValue* out) {
    auto a = std::make_shared<GgufArray>();
    const Field type_field = Child(field, "element type");
    KVTIER_RETURN_IF_ERROR(ReadValueType(&a->elem_type, type_field));
    if (a->elem_type == GgufValueType::kArray && depth + 1 >= kMaxArrayDepth) {
      return Err(type_field, pos_ - 4,
                 "arrays nested deeper than " + std::to_string(kMaxArrayDepth) + " levels");
    }
    const Field count_field = Child(field, "element count");
    const uint64_t at = pos_;
    uint64_t count = 0;
    KVTIER_RETURN_IF_ERROR(Read(&count, count_field));
    const uint64_t min_bytes = MinValueBytes(a->elem_type);
    if (count > Left() / min_bytes) {
      return Err(count_field, at,
                 std::to_string(count) + " items of " +
                     std::string(GgufValueTypeName(a->elem_type)) + " take at least " +
                     std::to_string(min_bytes) + " bytes each, the file has " +
                     std::to_string(Left()) + " bytes left");
    }
    values_ += count;
    if (values_ > kMaxMetadataValues) {
      return Err(count_field, at,
                 "more than " + GroupDigits(kMaxMetadataValues) + " metadata values in all",
                 StatusCode::kResourceExhausted);
    }
    a->items.resize(static_cast<size_t>(count));
    for (uint64_t i = 0; i < count; ++i) {
      const Field item = Indexed(&field, "item", i);
      KVTIER_RETURN_IF_ERROR(ReadValue(a->elem_type, item, depth + 1, &a->items[i]));
    }
    out->v = std::move(a);
    return Status::OK();
  }

  Status ParseHeader() {
    const Field magic = Leaf("magic");
    KVTIER_RETURN_IF_ERROR(Need(4, magic));
    if (std::memcmp(b_.data(), "GGUF", 4) != 0) {
      return Err(magic, 0,
                 "expected \"GGUF\", got \"" +
                     Printable(std::string_view(reinterpret_cast<const char*>(b_.data()), 4)) +
                     "\" (not a GGUF file)");
    }
    pos_ = 4;
    const Field version = Leaf("version");
    uint32_t v = 0;
    KVTIER_RETURN_IF_ERROR(Read(&v, version));
    if (v == 0x03000000u || v == 0x02000000u) {
      return Err(version, 4, "big-endian GGUF files are not supported",
                 StatusCode::kInvalidArgument);
    }
    if (v != 3 && v != 2) {
      return Err(version, 4, "expected 3 (or 2), got " + std::to_string(v),
                 StatusCode::kInvalidArgument);
    }
    f_->version_ = v;
    KVTIER_RETURN_IF_ERROR(Read(&n_tensors_, Leaf("tensor count")));
    KVTIER_RETURN_IF_ERROR(Read(&n_kv_, Leaf("metadata count")));
    if (n_kv_ > Left() / kMinKvBytes) {
      return Err(Leaf("metadata count"), 16,
                 std::to_string(n_kv_) + " key-value pairs take at least " +
                     std::to_string(kMinKvBytes) + " bytes each, the file has " +
                     std::to_string(Left()) + " bytes left");
    }
    if (n_tensors_ > Left() / kMinTensorInfoBytes ||
        n_kv_ * kMinKvBytes > Left() - n_tensors_ * kMinTensorInfoBytes) {
      return Err(Leaf("tensor count"), 8,
                 std::to_string(n_tensors_) + " tensor infos (at least " +
                     std::to_string(kMinTensorInfoBytes) + " bytes each) and " +
                     std::to_string(n_kv_) + " key-value pairs do not fit in the " +
                     std::to_string(Left()) + " bytes left");
    }
    return Status::OK();
  }

  Status ParseMetadata() {
    for (uint64_t i = 0; i < n_kv_; ++i) {
      const Field key_field = Indexed(nullptr, "key", i);
      const uint64_t key_at = pos_;
      std::string key;
      KVTIER_RETURN_IF_ERROR(ReadString(&key, key_field, kMaxNameBytes));
      if (key.empty()) return Err(key_field, key_at, "empty key");
      Field named = key_field;
      named.name = key;
      named.has_name = true;
      if (f_->metadata_.find(key) != f_->metadata_.end()) {
        return Err(named, key_at, "duplicate key");
      }
      GgufValueType t{};
      KVTIER_RETURN_IF_ERROR(ReadValueType(&t, Child(named, "type")));
      const Field value_field = Child(named, "value");
      const uint64_t value_at = pos_;
      GgufValue v;
      KVTIER_RETURN_IF_ERROR(ReadValue(t, value_field, 0, &v));
      if (key == "general.alignment") alignment_at_ = value_at;
      f_->metadata_.emplace(std::move(key), std::move(v));
    }
    return Status::OK();
  }

  Status ParseAlignment() {
    const GgufValue* v = f_->Find("general.alignment");
    if (v == nullptr) return Status::OK();
    const Field field = Leaf("key 'general.alignment'");
    const auto* a = std::get_if<uint64_t>(&v->v);
    if (v->type != GgufValueType::kUint32 || a == nullptr) {
      return Err(field, alignment_at_,
                 std::string("expected uint32, got ") + std::string(GgufValueTypeName(v->type)));
    }
    if (*a == 0 || (*a & (*a - 1)) != 0) {
      return Err(field, alignment_at_,
                 "expected a power of two, got " + std::to_string(*a));
    }
    f_->alignment_ = *a;
    return Status::OK();
  }

  Status ParseTensorInfos() {
    f_->tensors_.reserve(static_cast<size_t>(n_tensors_));
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      GgufTensor t;
      Field tf = Indexed(nullptr, "tensor", i);
      const uint64_t name_at = pos_;
      KVTIER_RETURN_IF_ERROR(ReadString(&t.name, Child(tf, "name"), kMaxNameBytes));
      if (t.name.empty()) return Err(Child(tf, "name"), name_at, "empty name");
      tf.name = t.name;
      tf.has_name = true;
      if (f_->tensor_index_.find(t.name) != f_->tensor_index_.end()) {
        return Err(Child(tf, "name"), name_at, "duplicate tensor name");
      }
      const Field dims_field = Child(tf, "n_dims");
      const uint64_t dims_at = pos_;
      uint32_t n_dims = 0;
      KVTIER_RETURN_IF_ERROR(Read(&n_dims, dims_field));
      if (n_dims == 0 || n_dims > kMaxDims) {
        return Err(dims_field, dims_at,
                   "expected 1.." + std::to_string(kMaxDims) + ", got " + std::to_string(n_dims));
      }
      t.shape.resize(n_dims);
      uint64_t n_values = 1;
      for (uint32_t d = 0; d < n_dims; ++d) {
        const Field df = Indexed(&tf, "dim", d);
        const uint64_t at = pos_;
        KVTIER_RETURN_IF_ERROR(Read(&t.shape[d], df));
        const uint64_t x = t.shape[d];
        if (x == 0 || x > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return Err(df, at, "expected 1..2^63-1, got " + std::to_string(x));
        }
        if (n_values > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / x) {
          return Err(df, at, "the product of the dimensions overflows int64");
        }
        n_values *= x;
      }
      t.n_values = n_values;
      const Field type_field = Child(tf, "type");
      const uint64_t type_at = pos_;
      KVTIER_RETURN_IF_ERROR(Read(&t.type, type_field));
      const GgmlTypeInfo* info = FindGgmlType(t.type);
      if (info == nullptr) {
        return Err(type_field, type_at,
                   "unsupported tensor type " + std::to_string(t.type) + " in tensor " + t.name,
                   StatusCode::kInvalidArgument);
      }
      if (t.shape[0] % info->block_values != 0) {
        return Err(Indexed(&tf, "dim", 0), dims_at + 4,
                   "expected a multiple of the " + std::string(info->name) + " block size " +
                       std::to_string(info->block_values) + ", got " +
                       std::to_string(t.shape[0]));
      }
      const uint64_t blocks = n_values / info->block_values;
      if (blocks > std::numeric_limits<uint64_t>::max() / info->block_bytes) {
        return Err(type_field, type_at, "the tensor's byte size overflows uint64");
      }
      t.n_bytes = blocks * info->block_bytes;
      const Field off_field = Child(tf, "offset");
      const uint64_t off_at = pos_;
      KVTIER_RETURN_IF_ERROR(Read(&t.offset, off_field));
      if (t.offset % f_->alignment_ != 0) {
        return Err(off_field, off_at,
                   "expected a multiple of the alignment " + std::to_string(f_->alignment_) +
                       ", got " + std::to_string(t.offset));
      }
      info_at_.push_back(off_at);
      f_->tensor_index_.emplace(t.name, f_->tensors_.size());
      f_->tensors_.push_back(std::move(t));
    }
    return Status::OK();
  }

  Status PlaceTensorData() {
    if (f_->tensors_.empty()) return Status::OK();
    const uint64_t align = f_->alignment_;
    const uint64_t size = b_.size();
    // pos_ <= size and align <= 2^32: no overflow.
    const uint64_t data_start = (pos_ + align - 1) / align * align;
    if (data_start > size) {
      return Err(Leaf("tensor data section"), pos_,
                 "starts at byte " + std::to_string(data_start) + ", past the end of the file (" +
                     std::to_string(size) + " bytes)");
    }
    const uint64_t data_bytes = size - data_start;
    std::vector<GgufTensor>& ts = f_->tensors_;
    for (size_t i = 0; i < ts.size(); ++i) {
      const GgufTensor& t = ts[i];
      if (t.offset > data_bytes || t.n_bytes > data_bytes - t.offset) {
        Field tf = Indexed(nullptr, "tensor", i);
        tf.name = t.name;
        tf.has_name = true;
        return Err(Child(tf, "offset"), info_at_[i],
                   "data [" + std::to_string(t.offset) + ", +" + std::to_string(t.n_bytes) +
                       ") runs past the end of the data section (" + std::to_string(data_bytes) +
                       " bytes from byte " + std::to_string(data_start) + ")");
      }
    }
    std::vector<size_t> order(ts.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return ts[a].offset < ts[b].offset; });
    for (size_t k = 1; k < order.size(); ++k) {
      const GgufTensor& prev = ts[order[k - 1]];
      const GgufTensor& cur = ts[order[k]];
      if (prev.offset + prev.n_bytes > cur.offset) {
        Field tf = Indexed(nullptr, "tensor", order[k]);
        tf.name = cur.name;
        tf.has_name = true;
        return Err(Child(tf, "offset"), info_at_[order[k]],
                   "data at " + std::to_string(cur.offset) + " overlaps tensor " +
                       std::to_string(order[k - 1]) + " '" + Printable(prev.name) + "' [" +
                       std::to_string(prev.offset) + ", +" + std::to_string(prev.n_bytes) + ")");
      }
    }
    for (GgufTensor& t : ts) t.data = b_.data() + data_start + t.offset;
    return Status::OK();
  }

  GgufFile* f_;
  std::span<const uint8_t> b_;
  uint64_t pos_ = 0;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
  uint64_t values_ = 0;
  uint64_t alignment_at_ = 0;
  std::vector<uint64_t> info_at_;  // byte offset of each tensor's offset field
};

Status ParseGguf(GgufFile* f) { return GgufParser(f).Parse(); }

}  // namespace kvtier
