// Whole-model quantization (kvtier/weights.h: ChooseTensorTypes, QuantizeModelFile): the
// per-tensor type rules of llama.cpp's presets, read from its src/llama-quant.cpp as facts,
// then kvtier's own quantizers. Stateless; thread-safe (each call owns its buffers).
#include <algorithm>
#include <cctype>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/gguf.h"
#include "kvtier/thread_pool.h"
#include "kvtier/weights.h"
#include "weights/weight_traits.h"

namespace kvtier {
namespace {

using T = GgmlType;

struct Preset {
  std::string_view name;
  T base;              // the default type of quantized tensors
  uint32_t file_type;  // llama.cpp's llama_ftype (general.file_type)
};

constexpr Preset kPresets[] = {
    {"Q4_K_M", T::kQ4_K, 15}, {"Q5_K_M", T::kQ5_K, 17}, {"Q3_K_M", T::kQ3_K, 12},
    {"Q6_K", T::kQ6_K, 18},   {"IQ4_XS", T::kIQ4_XS, 30}, {"Q4_1", T::kQ4_1, 3},
    {"Q5_0", T::kQ5_0, 8},    {"Q5_1", T::kQ5_1, 9},    {"IQ4_NL", T::kIQ4_NL, 25},
    {"Q8_0", T::kQ8_0, 7},    {"Q4_0", T::kQ4_0, 2},    {"F16", T::kF16, 1},
};

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

Result<const Preset*> FindPreset(std::string_view name) {
  for (const Preset& p : kPresets) {
    if (EqualsIgnoreCase(p.name, name)) return &p;
  }
  return Status::InvalidArgument("unknown quantization type '" + std::string(name) +
                                 "': valid types are " + QuantizePresetsHelp());
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
bool Contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// llama.cpp's use_more_bits: the first and last eighth of the layers and every third between.
bool UseMoreBits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

bool IsQuantized(T t) {
  return t != T::kF32 && t != T::kF16 && t != T::kBF16;
}

// llama.cpp's tensor_type_fallback for a row of `ncols` values.
T Fallback(T t, uint64_t ncols, int* fallbacks) {
  const size_t bv = WeightBlockValues(static_cast<uint32_t>(t));
  if (bv != 0 && ncols % bv == 0) return t;
  ++*fallbacks;
  T r = T::kF16;
  switch (t) {
    case T::kIQ4_XS: r = T::kIQ4_NL; break;
    case T::kQ2_K:
    case T::kQ3_K: r = T::kQ4_0; break;
    case T::kQ4_K: r = T::kQ5_0; break;
    case T::kQ5_K: r = T::kQ5_1; break;
    case T::kQ6_K: r = T::kQ8_0; break;
    default: break;
  }
  if (ncols % WeightBlockValues(static_cast<uint32_t>(r)) != 0) r = T::kF16;
  return r;
}

}  // namespace

std::string QuantizePresetsHelp() {
  std::string s;
  for (const Preset& p : kPresets) {
    if (!s.empty()) s += ", ";
    s += p.name;
  }
  return s;
}

Status CheckQuantizePreset(std::string_view preset) { return FindPreset(preset).status(); }

std::string DescribeTensorTypes(const GgufFile& f) {
  std::map<uint32_t, int> counts;
  for (const GgufTensor& t : f.tensors()) ++counts[t.type];
  std::string s = std::to_string(f.tensors().size()) + " tensors:";
  bool first = true;
  for (const auto& [type, n] : counts) {
    s += (first ? " " : ", ") + GgmlTypeName(type) + " " + std::to_string(n);
    first = false;
  }
  return s;
}

namespace {

int CountLayers(const GgufFile& f) {
  int n = 0;
  for (const GgufTensor& t : f.tensors()) {
    int layer = -1;
    if (t.name.rfind("blk.", 0) == 0) layer = std::atoi(t.name.c_str() + 4);
    n = std::max(n, layer + 1);
  }
  return n;
}

}  // namespace

namespace {

std::vector<uint32_t> ChooseTypes(const GgufFile& f, const Preset* p, int* n_fallbacks) {
  const bool tied = f.FindTensor("output.weight") == nullptr;
  int n_attn_v = 0;
  for (const GgufTensor& t : f.tensors()) n_attn_v += Contains(t.name, "attn_v.weight") ? 1 : 0;
  const int n_layer = CountLayers(f);
  // GQA ratio (IQ4_XS gives attn_v q5_K from 4 query heads per KV head on).
  int n_gqa = 1;
  {
    std::string arch;
    if (auto a = f.GetString("general.architecture"); a.ok()) arch = *a;
    auto heads = f.GetUint(arch + ".attention.head_count");
    auto kv_heads = f.GetUint(arch + ".attention.head_count_kv");
    if (heads.ok() && kv_heads.ok() && *kv_heads > 0) n_gqa = static_cast<int>(*heads / *kv_heads);
  }
  int i_attn_v = 0, i_ffn_down = 0;
  std::vector<uint32_t> out;
  for (const GgufTensor& t : f.tensors()) {
    const std::string& name = t.name;
    const bool weight2d =
        t.shape.size() >= 2 && EndsWith(name, "weight") && !Contains(name, "_norm.weight");
    if (!weight2d) {  // 1-D tensors and norms stay as they are
      out.push_back(t.type);
      continue;
    }
    if (!IsQuantized(p->base)) {
      out.push_back(static_cast<uint32_t>(p->base));
      continue;
    }
    T type = p->base;
    const std::string_view preset = p->name;
    if (name == "output.weight" || (tied && name == "token_embd.weight")) {
      const size_t bv = WeightBlockValues(static_cast<uint32_t>(p->base));
      if (t.shape[0] % bv != 0) type = T::kQ8_0;
      else if (type != T::kQ8_0) type = T::kQ6_K;
    } else if (name == "token_embd.weight") {
      // the preset's base type
    } else if (Contains(name, "attn_v.weight")) {
      if (preset == "Q3_K_M") type = i_attn_v < 2 ? T::kQ5_K : T::kQ4_K;
      else if ((preset == "IQ4_NL" || preset == "IQ4_XS") && n_gqa >= 4) type = T::kQ5_K;
      else if ((preset == "Q4_K_M" || preset == "Q5_K_M") && UseMoreBits(i_attn_v, n_attn_v)) type = T::kQ6_K;
      ++i_attn_v;
    } else if (Contains(name, "ffn_down")) {
      const int i = i_ffn_down, n = n_layer;
      if (preset == "Q3_K_M") type = i < n / 16 ? T::kQ5_K : T::kQ4_K;
      else if (preset == "Q4_K_M") { if (UseMoreBits(i, n)) type = T::kQ6_K; }
      else if (i < n / 8 && (preset == "IQ4_NL" || preset == "IQ4_XS")) type = T::kQ5_K;
      else if (preset == "Q5_K_M" && UseMoreBits(i, n)) type = T::kQ6_K;
      ++i_ffn_down;
    } else if (Contains(name, "attn_output.weight")) {
      if (preset == "Q3_K_M") type = T::kQ4_K;
    } else if (Contains(name, "attn_qkv.weight")) {
      if (preset == "Q3_K_M") type = T::kQ4_K;
      else if (preset == "Q4_K_M") type = T::kQ5_K;
      else if (preset == "Q5_K_M") type = T::kQ6_K;
    }
    out.push_back(static_cast<uint32_t>(Fallback(type, t.shape[0], n_fallbacks)));
  }
  return out;
}

}  // namespace

Result<std::vector<uint32_t>> ChooseTensorTypes(const GgufFile& f, std::string_view preset) {
  KVTIER_ASSIGN_OR_RETURN(const Preset* p, FindPreset(preset));
  int fallbacks = 0;
  return ChooseTypes(f, p, &fallbacks);
}

Result<QuantizeModelReport> QuantizeModelFile(const std::string& in, const std::string& out,
                                              std::string_view preset, ThreadPool* pool) {
  KVTIER_ASSIGN_OR_RETURN(const Preset* p, FindPreset(preset));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> f, GgufFile::Open(in));
  QuantizeModelReport report;
  const std::vector<uint32_t> types = ChooseTypes(*f, p, &report.fallbacks);
  report.in_bytes = f->file_bytes();
  GgufWriter w;
  w.set_alignment(f->alignment());
  for (const auto& [key, value] : f->metadata()) {
    if (key == "general.file_type" || key == "general.quantization_version" ||
        key == "general.alignment") {
      continue;
    }
    w.SetValue(key, value);
  }
  w.SetUint32("general.quantization_version", 2);
  w.SetUint32("general.file_type", p->file_type);
  if (f->alignment() != 32) w.SetUint32("general.alignment", static_cast<uint32_t>(f->alignment()));
  const std::vector<GgufTensor>& ts = f->tensors();
  for (size_t i = 0; i < ts.size(); ++i) {
    const GgufTensor& t = ts[i];
    const uint32_t type = types[i];
    std::vector<uint8_t> bytes;
    if (type == t.type) {
      bytes.assign(t.data, t.data + t.n_bytes);
    } else {
      const size_t n = t.shape[0], rows = t.n_values / n;
      KVTIER_ASSIGN_OR_RETURN(const size_t in_row, WeightRowBytes(t.type, n));
      KVTIER_ASSIGN_OR_RETURN(const size_t out_row, WeightRowBytes(type, n));
      bytes.resize(out_row * rows);
      // Rows in chunks: decode to f32, encode; each chunk owns its scratch.
      const size_t chunk = std::max<size_t>(1, 65536 / n);
      const size_t n_chunks = (rows + chunk - 1) / chunk;
      std::vector<Status> errors(n_chunks);
      auto run = [&](size_t c0, size_t c1) {
        std::vector<float> buf;  // [rows of the chunk][n]
        for (size_t c = c0; c < c1; ++c) {
          const size_t r0 = c * chunk, nr = std::min(chunk, rows - r0);
          buf.resize(nr * n);
          errors[c] = DequantizeWeightRows(t.type, t.data + r0 * in_row, nr, n, buf.data());
          if (errors[c].ok()) {
            errors[c] = QuantizeWeightRows(type, buf.data(), nr, n, bytes.data() + r0 * out_row);
          }
        }
      };
      if (pool != nullptr) {
        pool->ParallelFor(n_chunks, 1, run);
      } else {
        run(0, n_chunks);
      }
      for (const Status& s : errors) {
        if (!s.ok()) return Status(s.code(), in + ": tensor " + t.name + ": " + s.message());
      }
    }
    ++report.type_counts[type];
    KVTIER_RETURN_IF_ERROR(w.AddTensor(t.name, static_cast<GgmlType>(type), t.shape, std::move(bytes)));
  }
  KVTIER_RETURN_IF_ERROR(w.WriteFile(out));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> check, GgufFile::Open(out));
  report.out_bytes = check->file_bytes();
  return report;
}

}  // namespace kvtier
