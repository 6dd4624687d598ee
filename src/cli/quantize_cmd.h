// `kvtier quantize IN.gguf OUT.gguf TYPE [--threads N]`: writes a copy of a GGUF model with
// its weights quantized to a llama.cpp-style preset (Q4_K_M, Q5_K_M, Q3_K_M, Q6_K, IQ4_XS,
// Q4_1, Q5_0, ...; per-tensor types as llama.cpp's presets choose them) by kvtier's own
// quantizers (kvtier/weights.h). The output is written crash-safely (temporary file, fsync,
// rename). One of kvtier's user commands (commands.h). Thread-compatible.
#pragma once

#include <iosfwd>
#include <string>

#include "cli/command.h"
#include "kvtier/status.h"

namespace kvtier::cli {

struct QuantizeFlags {
  std::string in, out, type;
  int threads = 0;  // 0: every core
};

// Runs the command; prints the per-type tensor counts and sizes to `out`.
Status RunQuantize(const QuantizeFlags& f, std::ostream& out);

Command QuantizeCommand();

}  // namespace kvtier::cli
