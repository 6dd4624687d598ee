// `kvtier make-test-model` flags and run (see make_test_model.h).
#include "cli/make_test_model.h"

#include <unistd.h>

#include <cstdio>
#include <ostream>

#include "base/strings.h"
#include "kvtier/thread_pool.h"
#include "kvtier/weights.h"

namespace kvtier::cli {

Status RunMakeTestModel(MakeTestModelFlags f, std::ostream& out) {
  // A plain type (f32, f16, bf16, q8_0, q4_0) is written directly; a quantization preset
  // (Q4_K_M, IQ4_XS, ...) is written in f16 to a temporary file, then quantized by
  // QuantizeModelFile with llama.cpp's per-tensor choices.
  Result<GgmlType> plain = ParseTestModelWeightType(f.weight_type);
  std::string preset;
  if (!plain.ok()) {
    if (!CheckQuantizePreset(f.weight_type).ok()) {
      return Status::InvalidArgument("--weight-type: expected f32, f16, bf16, q8_0, q4_0 or a "
                                     "quantization preset (" + QuantizePresetsHelp() +
                                     "), got '" + f.weight_type + "'");
    }
    preset = f.weight_type;
    f.config.weight_type = GgmlType::kF16;
  } else {
    f.config.weight_type = *plain;
  }
  if (f.no_tied) f.config.tied = false;
  KVTIER_RETURN_IF_ERROR(ValidateTestModelConfig(f.config));
  KVTIER_ASSIGN_OR_RETURN(GgufWriter w, BuildTestModel(f.config));
  if (preset.empty()) {
    KVTIER_RETURN_IF_ERROR(w.WriteFile(f.out));
    out << "wrote " << f.out << ": " << f.config.arch << ", " << f.config.layers << " layers, "
        << DescribeBytes(TestModelTensorBytes(f.config)) << " of " << f.weight_type
        << " weights\n";
    return Status::OK();
  }
  const std::string tmp = f.out + ".f16.tmp." + std::to_string(::getpid());
  KVTIER_RETURN_IF_ERROR(w.WriteFile(tmp));
  ThreadPool pool(0);
  Result<QuantizeModelReport> r = QuantizeModelFile(tmp, f.out, preset, &pool);
  std::remove(tmp.c_str());
  if (!r.ok()) return Status(r.status().code(), "--weight-type: " + r.status().message());
  out << "wrote " << f.out << ": " << f.config.arch << ", " << f.config.layers << " layers, "
      << DescribeBytes(r->out_bytes) << " file, " << preset << " weights (";
  bool first = true;
  for (const auto& [type, n] : r->type_counts) {
    out << (first ? "" : ", ") << GgmlTypeName(type) << " " << n;
    first = false;
  }
  out << " tensors)\n";
  return Status::OK();
}

}  // namespace kvtier::cli
