// `kvtier check-model` (cli/check_model.h).
#include "cli/check_model.h"

#include <CLI/CLI.hpp>
#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "kvtier/gguf.h"
#include "kvtier/quant.h"
#include "kvtier/model.h"
#include "kvtier/weights.h"

namespace kvtier::cli {

Result<ModelCheck> CheckModel(const std::string& path) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  ModelCheck out;
  std::vector<float> row;
  for (const GgufTensor& t : file->tensors()) {
    TensorCheck c;
    c.name = t.name;
    c.type = GgmlTypeName(t.type);
    c.values = t.n_values;
    const uint64_t width = t.shape.empty() ? 1 : t.shape[0];
    const Result<size_t> row_bytes = WeightRowBytes(t.type, width);
    if (!row_bytes.ok()) {
      c.skipped = true;
      ++out.skipped;
      out.tensors.push_back(std::move(c));
      continue;
    }
    const uint64_t rows = t.n_values / width;
    row.resize(width);
    for (uint64_t r = 0; r < rows; ++r) {
      KVTIER_RETURN_IF_ERROR(
          DequantizeWeightRows(t.type, t.data + r * *row_bytes, 1, width, row.data()));
      for (uint64_t i = 0; i < width; ++i) {
        uint32_t bits;
        std::memcpy(&bits, &row[i], sizeof bits);
        if ((bits & 0x7f800000u) != 0x7f800000u) continue;
        if ((bits & 0x007fffffu) != 0) ++c.nan;
        else ++c.inf;
        if (c.first_bad < 0) c.first_bad = static_cast<int64_t>(r * width + i);
      }
    }
    if (c.nan + c.inf > 0) ++out.damaged;
    out.tensors.push_back(std::move(c));
  }
  return out;
}

void PrintModelCheck(const std::string& path, const ModelCheck& c, bool json, std::ostream& out) {
  if (json) {
    nlohmann::json j;
    j["model"] = path;
    j["tensors"] = c.tensors.size();
    j["damaged"] = c.damaged;
    j["skipped"] = c.skipped;
    j["bad_tensors"] = nlohmann::json::array();
    for (const TensorCheck& t : c.tensors) {
      if (t.nan + t.inf == 0 && !t.skipped) continue;
      j["bad_tensors"].push_back({{"name", t.name}, {"type", t.type}, {"nan", t.nan},
                                  {"inf", t.inf}, {"first_bad", t.first_bad},
                                  {"skipped", t.skipped}});
    }
    out << j.dump(2) << "\n";
    return;
  }
  for (const TensorCheck& t : c.tensors) {
    if (t.skipped) {
      out << "  " << t.name << " (" << t.type << "): skipped (a type the runtime does not read)\n";
    } else if (t.nan + t.inf > 0) {
      out << "  " << t.name << " (" << t.type << "): " << t.nan << " NaN, " << t.inf
          << " Inf of " << t.values << " values; first at index " << t.first_bad << "\n";
    }
  }
  out << path << ": " << c.tensors.size() << " tensors scanned, " << c.damaged
      << " with non-finite values, " << c.skipped << " skipped\n";
}

Command CheckModelCommand() {
  return {"check-model", "Scan a GGUF model's weights for non-finite values (NaN, Inf)", {},
          [](CLI::App& s) -> CommandRun {
    struct Flags {
      std::string model;
      bool json = false;
    };
    auto f = std::make_shared<Flags>();
    s.add_option("--model", f->model, "GGUF model")->required();
    s.add_flag("--json", f->json, "JSON report");
    return [f] {
      Result<ModelCheck> c = CheckModel(f->model);
      if (!c.ok()) return Fail("kvtier check-model", c.status());
      PrintModelCheck(f->model, *c, f->json, std::cout);
      std::cout.flush();
      return c->damaged > 0 ? 1 : 0;
    };
  }};
}

}  // namespace kvtier::cli
