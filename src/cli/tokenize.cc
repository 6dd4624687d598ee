// `kvtier tokenize`: GGUF tokenizer over stdin. Thread-compatible.
#include "cli/tokenize.h"

#include <istream>
#include <iterator>
#include <ostream>
#include <string>

#include "cli/model_session.h"
#include "kvtier/gguf.h"
#include "kvtier/tokenizer.h"

namespace kvtier::cli {

Status RunTokenize(const TokenizeConfig& config, std::istream& in, std::ostream& out) {
  const std::string path = config.model.empty() ? DefaultModelPath() : config.model;
  auto file = GgufFile::Open(path);
  if (!file.ok()) return file.status();
  auto tok = Tokenizer::FromGguf(**file);
  if (!tok.ok()) {
    std::string msg = path;
    msg += ": ";
    msg += tok.status().message();
    return Status(tok.status().code(), std::move(msg));
  }
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Status::IOError("reading standard input failed");
  const auto ids = (*tok)->Encode(text, config.add_bos, config.parse_special);
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) line += ' ';
    line += std::to_string(ids[i]);
  }
  line += '\n';
  out << line;
  out.flush();
  if (!out) return Status::IOError("writing standard output failed");
  return Status::OK();
}

}  // namespace kvtier::cli
