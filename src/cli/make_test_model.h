// `kvtier make-test-model`: writes a seeded random llama / qwen2 / qwen3 model as GGUF
// (include/kvtier/test_model.h), loadable by kvtier and llama.cpp. The subcommand's flags are
// registered here so main.cc only adds and dispatches it. Thread-compatible.
#pragma once

#include <iosfwd>
#include <string>

#include "kvtier/status.h"
#include "kvtier/test_model.h"

namespace kvtier::cli {

struct MakeTestModelFlags {
  TestModelConfig config;
  std::string out;
  std::string weight_type = "f16";
  bool no_tied = false;
};


// Validates the flags (InvalidArgument naming the flag), writes the file, prints one line
// ("wrote FILE: arch, N tensors, B bytes") to `out`.
Status RunMakeTestModel(MakeTestModelFlags flags, std::ostream& out);

}  // namespace kvtier::cli
