// Format descriptors: validation, stable ids, names, sizes. Stateless; thread-safe.
#include "kvtier/format.h"

#include <charconv>
#include <string>

namespace kvtier {
namespace {

constexpr int kAffineBits[] = {2, 3, 4, 5, 6, 8};
constexpr int kAffineGroups[] = {32, 64, 128};

bool IsAffineBits(int b) {
  for (int v : kAffineBits) if (v == b) return true;
  return false;
}
bool IsAffineGroup(int g) {
  for (int v : kAffineGroups) if (v == g) return true;
  return false;
}

int Log2(uint32_t v) {
  int l = 0;
  while ((1u << l) < v) ++l;
  return l;
}

// Parses a decimal integer that must fill the whole string.
bool ParseInt(std::string_view s, int* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

Format Format::Plain(DType t) {
  switch (t) {
    case DType::kF32: return F32();
    case DType::kF16: return F16();
    case DType::kBF16: return BF16();
  }
  return F16();
}

std::string ValidFormatsHelp() {
  return "f32, f16, bf16, q8_0, q4_0, affine<bits>g<group>[:<scale dtype>] with bits in "
         "{2, 3, 4, 5, 6, 8}, group in {32, 64, 128} and scale dtype in {f32, f16, bf16} "
         "(e.g. affine4g64, affine8g32:bf16), rot<bits>[s<seed>] with bits in {2, 3, 4} and "
         "seed in 0..255 (e.g. rot4, rot3s7), chan<bits>g<tokens> with bits in {2, 3, 4} and "
         "tokens in {32, 64, 128} (K only, per channel across a block's tokens; e.g. chan4g64), "
         "chanmix<bits>g<tokens> with bits in {2, 3} and tokens in {32, 64, 128} (chan with "
         "bits + 1 for the half of the channels of largest range; e.g. chanmix3g64)";
}

std::vector<Format> AllSupportedFormats() {
  std::vector<Format> v = {Format::F32(), Format::F16(), Format::BF16(), Format::Q8_0(),
                           Format::Q4_0()};
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    for (int group : {32, 64, 128}) {
      for (DType sd : {DType::kF32, DType::kF16, DType::kBF16}) {
        v.push_back(Format::Affine(bits, group, sd));
      }
    }
  }
  for (int bits : {2, 3, 4}) v.push_back(Format::Rot(bits, 0));
  v.push_back(Format::Rot(4, 1));
  return v;
}

std::vector<Format> AllTokenGroupedFormats() {
  std::vector<Format> v;
  for (int bits : {2, 3, 4}) {
    for (int tokens : {32, 64, 128}) v.push_back(Format::Chan(bits, tokens));
  }
  for (int bits : {2, 3}) {
    for (int tokens : {32, 64, 128}) v.push_back(Format::ChanMix(bits, tokens));
  }
  return v;
}

Status Format::Validate() const {
  const std::string what = "format " + name();
  switch (kind) {
    case FormatKind::kF32:
    case FormatKind::kF16:
    case FormatKind::kBF16:
      if (*this != Plain(static_cast<DType>(static_cast<uint8_t>(kind))) || seed != 0) {
        return Status::InvalidArgument(what + ": inconsistent plain-dtype descriptor");
      }
      return Status::OK();
    case FormatKind::kQ8_0:
      if (*this != Q8_0() || seed != 0) return Status::InvalidArgument(what + ": q8_0 is 8 bits, group 32, f16 scale");
      return Status::OK();
    case FormatKind::kQ4_0:
      if (*this != Q4_0() || seed != 0) return Status::InvalidArgument(what + ": q4_0 is 4 bits, group 32, f16 scale");
      return Status::OK();
    case FormatKind::kAffine:
      if (!IsAffineBits(bits)) {
        return Status::InvalidArgument("affine bits " + std::to_string(bits) +
                                       " unsupported: valid bits are 2, 3, 4, 5, 6, 8");
      }
      if (!IsAffineGroup(group)) {
        return Status::InvalidArgument("affine group size " + std::to_string(group) +
                                       " unsupported: valid group sizes are 32, 64, 128");
      }
      if (static_cast<uint8_t>(scale_dtype) > static_cast<uint8_t>(DType::kBF16)) {
        return Status::InvalidArgument(what + ": scale dtype must be f32, f16 or bf16");
      }
      if (seed != 0) return Status::InvalidArgument(what + ": affine formats have no seed");
      return Status::OK();
    case FormatKind::kRot:
      if (bits < 2 || bits > 4) {
        return Status::InvalidArgument("rot bits " + std::to_string(bits) +
                                       " unsupported: valid bits are 2, 3, 4");
      }
      if (*this != Rot(bits, seed)) {
        return Status::InvalidArgument(what + ": rot formats are group 32 with f16 scales");
      }
      return Status::OK();
    case FormatKind::kChan:
      if (bits < 2 || bits > 4) {
        return Status::InvalidArgument("chan bits " + std::to_string(bits) +
                                       " unsupported: valid bits are 2, 3, 4");
      }
      if (group != 32 && group != 64 && group != 128) {
        return Status::InvalidArgument("chan group of " + std::to_string(group) +
                                       " tokens unsupported: valid groups are 32, 64, 128");
      }
      if (*this != Chan(bits, group)) {
        return Status::InvalidArgument(what + ": chan formats have f16 scales and no seed");
      }
      return Status::OK();
    case FormatKind::kChanMix:
      if (bits < 2 || bits > 3) {
        return Status::InvalidArgument("chanmix bits " + std::to_string(bits) +
                                       " unsupported: valid bits are 2, 3");
      }
      if (group != 32 && group != 64 && group != 128) {
        return Status::InvalidArgument("chanmix group of " + std::to_string(group) +
                                       " tokens unsupported: valid groups are 32, 64, 128");
      }
      if (*this != ChanMix(bits, group)) {
        return Status::InvalidArgument(what + ": chanmix formats have f16 mins / maxes and no seed");
      }
      return Status::OK();
  }
  return Status::InvalidArgument("unknown format kind " +
                                 std::to_string(static_cast<int>(kind)) + ": valid formats are " +
                                 ValidFormatsHelp());
}

Status Format::CheckHeadDim(size_t head_dim) const {
  KVTIER_RETURN_IF_ERROR(Validate());
  if (is_token_grouped() &&
      (head_dim == 0 || head_dim > 256 || head_dim % 16 != 0 || (4 * head_dim) % group != 0)) {
    // group counts tokens here; a row packs head_dim codes and a 4 * head_dim / group byte
    // slice of its group's scales and mins.
    return Status::InvalidArgument("head_dim " + std::to_string(head_dim) +
                                   " cannot be stored as " + name() +
                                   ": expected a multiple of 16 up to 256 with 4 * head_dim a "
                                   "multiple of its " + std::to_string(group) +
                                   "-token group (e.g. 64 or 128)");
  }
  if (is_token_grouped()) return Status::OK();
  if (head_dim == 0 || head_dim % group != 0) {
    return Status::InvalidArgument(
        "head_dim " + std::to_string(head_dim) + " cannot be stored as " + name() +
        ": expected a positive multiple of its group size " + std::to_string(group) +
        (group > 1 ? " (e.g. " + std::to_string(group * 2) + " or 128)" : ""));
  }
  return Status::OK();
}

uint32_t Format::id() const {
  const uint32_t top = kind == FormatKind::kRot ? seed : static_cast<uint32_t>(scale_dtype);
  return static_cast<uint32_t>(kind) | static_cast<uint32_t>(bits) << 8 |
         static_cast<uint32_t>(Log2(group)) << 16 |
         top << 24;
}

Result<Format> Format::FromId(uint32_t id) {
  const uint32_t log2_group = (id >> 16) & 0xff;
  const bool rot = (id & 0xff) == static_cast<uint32_t>(FormatKind::kRot);
  if (log2_group > 15 || (!rot && (id >> 24) > 2) || (id & 0xff) > 8) {
    return Status::Corruption("invalid format id 0x" + [&] {
      char buf[16];
      auto [p, ec] = std::to_chars(buf, buf + sizeof buf, id, 16);
      (void)ec;
      return std::string(buf, p);
    }());
  }
  Format f{static_cast<FormatKind>(id & 0xff), static_cast<uint8_t>((id >> 8) & 0xff),
           static_cast<uint16_t>(1u << log2_group),
           rot ? DType::kF16 : static_cast<DType>(id >> 24), static_cast<uint8_t>(rot ? id >> 24 : 0)};
  Status s = f.Validate();
  if (!s.ok()) return Status::Corruption("format id " + std::to_string(id) + ": " + s.message());
  return f;
}

std::string Format::name() const {
  switch (kind) {
    case FormatKind::kF32: return "f32";
    case FormatKind::kF16: return "f16";
    case FormatKind::kBF16: return "bf16";
    case FormatKind::kQ8_0: return "q8_0";
    case FormatKind::kQ4_0: return "q4_0";
    case FormatKind::kAffine:
      return "affine" + std::to_string(bits) + "g" + std::to_string(group);
    case FormatKind::kRot:
      return "rot" + std::to_string(bits) + "s" + std::to_string(seed);
    case FormatKind::kChan:
      return "chan" + std::to_string(bits) + "g" + std::to_string(group);
    case FormatKind::kChanMix:
      return "chanmix" + std::to_string(bits) + "g" + std::to_string(group);
  }
  return "invalid-format";
}

std::string Format::spec() const {
  if (kind != FormatKind::kAffine) return name();
  return name() + ":" + std::string(DTypeName(scale_dtype));
}

double Format::bits_per_value() const {
  switch (kind) {
    case FormatKind::kF32:
    case FormatKind::kF16:
    case FormatKind::kBF16:
      return bits;
    case FormatKind::kQ8_0:
    case FormatKind::kQ4_0:
    case FormatKind::kRot:
      return bits + 16.0 / group;
    case FormatKind::kAffine:
    case FormatKind::kChan:
      return bits + 2.0 * 8.0 * static_cast<double>(DTypeSize(scale_dtype)) / group;
    case FormatKind::kChanMix:
      return bits + 0.5 + 32.0 / group;
  }
  return 0;
}

size_t Format::row_bytes(size_t head_dim) const {
  switch (kind) {
    case FormatKind::kF32:
    case FormatKind::kF16:
    case FormatKind::kBF16:
      return head_dim * bits / 8;
    case FormatKind::kQ8_0:
      return head_dim / 32 * 34;
    case FormatKind::kQ4_0:
      return head_dim / 32 * 18;
    case FormatKind::kAffine:
      return head_dim * bits / 8 + 2 * (head_dim / group) * DTypeSize(scale_dtype);
    case FormatKind::kRot:
      return head_dim / 32 * (2 + 32 * bits / 8);
    case FormatKind::kChan:
      // The codes of one token, then this row's slice of its group's [scale][min] arrays
      // (4 * head_dim bytes over `group` rows): bits + 32 / group bits per value.
      return head_dim * bits / 8 + 4 * head_dim / group;
    case FormatKind::kChanMix:
      // D * bits + D / 2 code bits, then the row's slice of [lo][hi] (quant/chanmix.h).
      return head_dim * (2 * bits + 1) / 16 + 4 * head_dim / group;
  }
  return 0;
}

Result<Format> ParseFormat(std::string_view name, FormatDefaults defaults) {
  auto unknown = [&](const std::string& why) {
    return Status::InvalidArgument("unknown KV format '" + std::string(name) + "'" +
                                   (why.empty() ? "" : " (" + why + ")") +
                                   ": valid formats are " + ValidFormatsHelp());
  };
  if (name == "f32") return Format::F32();
  if (name == "f16") return Format::F16();
  if (name == "bf16") return Format::BF16();
  if (name == "q8_0") return Format::Q8_0();
  if (name == "q4_0") return Format::Q4_0();
  constexpr std::string_view kRotName = "rot";
  if (name.substr(0, kRotName.size()) == kRotName) {
    std::string_view rest = name.substr(kRotName.size());
    int bits = 0, seed = 0;
    if (size_t sp = rest.find('s'); sp != std::string_view::npos) {
      if (!ParseInt(rest.substr(sp + 1), &seed) || seed < 0 || seed > 255) {
        return unknown("bad seed: expected 0..255");
      }
      rest = rest.substr(0, sp);
    }
    if (!ParseInt(rest, &bits)) return unknown("bad bit width");
    if (bits < 0 || bits > 255) return unknown("out of range");
    Format f = Format::Rot(bits, seed);
    Status s = f.Validate();
    if (!s.ok()) return unknown(s.message());
    return f;
  }
  constexpr std::string_view kChanName = "chan";
  constexpr std::string_view kChanMixName = "chanmix";
  if (name.substr(0, kChanName.size()) == kChanName) {
    const bool mix = name.substr(0, kChanMixName.size()) == kChanMixName;
    std::string_view rest = name.substr(mix ? kChanMixName.size() : kChanName.size());
    int bits = 0, tokens = 0;
    const size_t g = rest.find('g');
    if (g == std::string_view::npos) return unknown("chan needs g<tokens>, e.g. chan4g64");
    if (!ParseInt(rest.substr(g + 1), &tokens) || tokens < 0 || tokens > 65535) {
      return unknown("bad token group");
    }
    if (!ParseInt(rest.substr(0, g), &bits) || bits < 0 || bits > 255) return unknown("bad bit width");
    Format f = mix ? Format::ChanMix(bits, tokens) : Format::Chan(bits, tokens);
    Status s = f.Validate();
    if (!s.ok()) return unknown(s.message());
    return f;
  }
  constexpr std::string_view kAffine = "affine";
  if (name.substr(0, kAffine.size()) != kAffine) return unknown("");
  std::string_view rest = name.substr(kAffine.size());
  DType scale_dtype = defaults.scale_dtype;
  if (size_t colon = rest.find(':'); colon != std::string_view::npos) {
    Result<DType> sd = ParseDType(rest.substr(colon + 1));
    if (!sd.ok()) return unknown(sd.status().message());
    scale_dtype = *sd;
    rest = rest.substr(0, colon);
  }
  int bits = 0;
  int group = defaults.group;
  if (size_t g = rest.find('g'); g != std::string_view::npos) {
    if (!ParseInt(rest.substr(g + 1), &group)) return unknown("bad group size");
    rest = rest.substr(0, g);
  }
  if (!ParseInt(rest, &bits)) return unknown("bad bit width");
  Format f = Format::Affine(bits, group, scale_dtype);
  if (bits < 0 || bits > 255 || group < 0 || group > 65535) return unknown("out of range");
  Status s = f.Validate();
  if (!s.ok()) return unknown(s.message());
  return f;
}

}  // namespace kvtier
