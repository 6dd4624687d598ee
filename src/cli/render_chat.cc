// `kvtier render-chat` (cli/render_chat.h).
#include "cli/render_chat.h"

#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>

#include "kvtier/jinja.h"

namespace kvtier::cli {

Command RenderChatCommand() {
  return {"render-chat", "Render a Jinja chat template over a JSON conversation read on stdin", {},
          [](CLI::App& s) -> CommandRun {
    struct Flags {
      std::string path;
      int64_t now = -1;
    };
    auto f = std::make_shared<Flags>();
    s.add_option("--template", f->path, "Jinja chat template file")->required();
    s.add_option("--now", f->now,
                 "strftime_now() time, seconds since the epoch (UTC); default: the local clock");
    return [f] {
      const std::string who = "kvtier render-chat";
      std::ifstream in(f->path, std::ios::binary);
      if (!in) return Fail(who, Status::InvalidArgument("cannot read --template " + f->path));
      const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
      Result<jinja::Value> vars = jinja::ParseJson(input);
      if (!vars.ok()) return Fail(who, Status::InvalidArgument("stdin: " + vars.status().message()));
      if (!vars->is_dict()) {
        return Fail(who, Status::InvalidArgument("stdin: expected a JSON object (messages, ...)"));
      }
      Result<jinja::Template> t = jinja::Template::Parse(source);
      if (!t.ok()) return Fail(who, Status::Internal(f->path + ": " + t.status().message()));
      jinja::RenderOptions opts;
      opts.now_epoch_seconds = f->now;
      Result<std::string> out = t->Render(*vars, opts);
      if (!out.ok()) return Fail(who, Status::Internal(f->path + ": " + out.status().message()));
      std::cout << *out;
      std::cout.flush();
      return 0;
    };
  }};
}

}  // namespace kvtier::cli
