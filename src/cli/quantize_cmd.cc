// `kvtier quantize` (cli/quantize_cmd.h).
#include "cli/quantize_cmd.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>

#include "base/timer.h"
#include "kvtier/gguf.h"
#include "kvtier/thread_pool.h"
#include "kvtier/weights.h"

namespace kvtier::cli {

Status RunQuantize(const QuantizeFlags& f, std::ostream& out) {
  if (f.in == f.out) {
    return Status::InvalidArgument("kvtier quantize: IN and OUT are the same file (" + f.in + ")");
  }
  ThreadPool pool(f.threads);
  Timer timer;
  KVTIER_ASSIGN_OR_RETURN(const QuantizeModelReport r, QuantizeModelFile(f.in, f.out, f.type, &pool));
  out << f.out << ": " << f.type << ",";
  bool first = true;
  for (const auto& [type, n] : r.type_counts) {
    out << (first ? " " : ", ") << GgmlTypeName(type) << " " << n;
    first = false;
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "; %.2f MiB -> %.2f MiB in %.1f s", r.in_bytes / 1048576.0,
                r.out_bytes / 1048576.0, timer.Seconds());
  out << buf;
  if (r.fallbacks > 0) out << " (" << r.fallbacks << " tensors fell back: row length)";
  out << "\n";
  return Status::OK();
}

Command QuantizeCommand() {
  return {"quantize",
          "Quantize a GGUF model's weights to a llama.cpp-style preset (" +
              QuantizePresetsHelp() + ")",
          {}, [](CLI::App& s) -> CommandRun {
    auto f = std::make_shared<QuantizeFlags>();
    s.add_option("IN", f->in, "Input GGUF model")->required();
    s.add_option("OUT", f->out, "Output GGUF file (replaced atomically)")->required();
    s.add_option("TYPE", f->type, QuantizePresetsHelp())->required();
    s.add_option("--threads", f->threads, "Threads (0: every core)")->capture_default_str();
    return [f] {
      const Status st = RunQuantize(*f, std::cout);
      return st.ok() ? 0 : Fail("kvtier quantize", st);
    };
  }};
}

}  // namespace kvtier::cli
