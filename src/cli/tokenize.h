// `kvtier tokenize`: reads text on stdin and prints the token ids of a GGUF model's tokenizer,
// space-separated on one line. Thread-compatible (one call at a time per stream).
#pragma once

#include <iosfwd>
#include <string>

#include "kvtier/status.h"

namespace kvtier::cli {

struct TokenizeConfig {
  std::string model;          // GGUF file; empty: the bundled default model (not available yet)
  bool add_bos = false;       // prepend the BOS token (when the vocabulary has one)
  bool parse_special = true;  // control tokens written in the text become their ids
};

// Reads all of `in` (bytes as they are: a trailing newline is part of the text), writes the ids
// and a newline to `out`. InvalidArgument for a missing model or an unusable tokenizer.
Status RunTokenize(const TokenizeConfig& config, std::istream& in, std::ostream& out);

}  // namespace kvtier::cli
