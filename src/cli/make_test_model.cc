// `kvtier make-test-model` flags and run (see make_test_model.h).
#include "cli/make_test_model.h"

#include <ostream>

#include "base/strings.h"

namespace kvtier::cli {

Status RunMakeTestModel(MakeTestModelFlags f, std::ostream& out) {
  KVTIER_ASSIGN_OR_RETURN(f.config.weight_type, ParseTestModelWeightType(f.weight_type));
  if (f.no_tied) f.config.tied = false;
  KVTIER_RETURN_IF_ERROR(ValidateTestModelConfig(f.config));
  KVTIER_ASSIGN_OR_RETURN(GgufWriter w, BuildTestModel(f.config));
  KVTIER_RETURN_IF_ERROR(w.WriteFile(f.out));
  out << "wrote " << f.out << ": " << f.config.arch << ", " << f.config.layers << " layers, "
      << DescribeBytes(TestModelTensorBytes(f.config)) << " of " << f.weight_type
      << " weights\n";
  return Status::OK();
}

}  // namespace kvtier::cli
