// `kvtier check-model --model FILE [--json]`: scans every weight tensor of a GGUF model for
// non-finite values (NaN, +-Inf), dequantizing each row of the formats the runtime reads
// (every type of kvtier/weights.h; other types are listed as skipped). Exit status 1 and one line
// per damaged tensor (its name, NaN and Inf counts, the first bad index) when any is found.
// One of kvtier's user commands (commands.h). Thread-compatible; CheckModel is a pure
// function of the file.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "cli/command.h"
#include "kvtier/status.h"

namespace kvtier::cli {

struct TensorCheck {
  std::string name;
  std::string type;
  uint64_t values = 0;
  uint64_t nan = 0;
  uint64_t inf = 0;
  int64_t first_bad = -1;  // flat index of the first non-finite value, -1 when none
  bool skipped = false;    // a type the runtime does not read
};

struct ModelCheck {
  std::vector<TensorCheck> tensors;
  uint64_t damaged = 0;  // tensors with a non-finite value
  uint64_t skipped = 0;
};

// Every tensor of `path` scanned (IOError / InvalidArgument when the file cannot be read).
Result<ModelCheck> CheckModel(const std::string& path);
// The report: one line per damaged or skipped tensor and a summary; JSON with `json`.
void PrintModelCheck(const std::string& path, const ModelCheck& c, bool json, std::ostream& out);

// The `check-model` command (exit status 1 when a tensor is damaged, 2 on bad input).
Command CheckModelCommand();

}  // namespace kvtier::cli
