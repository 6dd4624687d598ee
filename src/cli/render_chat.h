// `kvtier render-chat --template FILE.jinja [--now EPOCH]`: renders a chat template with the
// Jinja engine (kvtier/jinja.h). Reads one JSON object on stdin (messages, tools,
// add_generation_prompt, bos_token, eos_token and any other key, each passed to the template as
// a variable of that name) and prints the rendered text exactly, with no added newline. A
// template that fails to parse or raises exits 1 with the message (file:line:col); bad input
// (unreadable file, stdin not a JSON object) exits 2. One of kvtier's user commands
// (commands.h).
#pragma once

#include "cli/command.h"

namespace kvtier::cli {

Command RenderChatCommand();

}  // namespace kvtier::cli
