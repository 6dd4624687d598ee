// The Anthropic Messages handlers (server/anthropic_serve.h).
#include "server/anthropic_serve.h"

#include <malloc.h>

#include <cctype>
#include <algorithm>
#include <cstdio>
#include <optional>

#include "server/anthropic.h"
#include "server/anthropic_tools.h"
#include "server/generation.h"
#include "server/tool_serve.h"

namespace kvtier::server {
namespace {

ApiError Err(int status, std::string message, std::string param = "") {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

// The engine's refusals and failures as HTTP errors (as the OpenAI path maps them).
ApiError FromStatus(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument: return Err(400, s.message());
    case StatusCode::kUnavailable: return Err(503, "the server is overloaded: " + s.message());
    case StatusCode::kResourceExhausted: return Err(413, s.message());
    default: return Err(500, s.ToString());
  }
}

void Reply(MessagesHost& host, Exchange& x, const char* endpoint, const ApiError& e) {
  x.Reply(e.status, "application/json", AnthropicErrorJson(e));
  host.metrics->Request(endpoint, e.status);
}

// Parses the body and builds the prompt; false with *e set otherwise. The body's memory goes
// back as soon as it is parsed.
bool Prepare(MessagesHost& host, Exchange& x, bool count_tokens, MessagesRequest* r,
             std::vector<int32_t>* prompt, ApiError* e) {
  const uint64_t max_prompt_bytes =
      (static_cast<uint64_t>(host.context) + 2) * host.max_token_bytes;
  const bool parsed =
      ParseMessagesRequest(x.body(), count_tokens, r, e, max_prompt_bytes, host.context);
  const bool large = x.body().size() > (1u << 20);
  std::string().swap(x.mutable_body());
  if (large) malloc_trim(0);
  if (!parsed) return false;
  if (!PrepareToolRequest(host.tool_syntax, &r->chat, e, "tools")) return false;
  // A final assistant message is a prefill: the answer continues it (and leaves it out).
  std::string prefill;
  if (!r->chat.messages.empty() && r->chat.messages.back().role == "assistant") {
    prefill = std::move(r->chat.messages.back().content);
    r->chat.messages.pop_back();
    if (!prefill.empty() && std::isspace(static_cast<unsigned char>(prefill.back()))) {
      *e = Err(400,
               "messages: the final assistant message (a prefill the answer continues) cannot "
               "end with whitespace",
               "messages");
      return false;
    }
  }
  bool ok = host.prompt(r->chat, prompt, e);
  if (ok && !prefill.empty()) {
    const std::vector<int32_t> more =
        host.tokenizer->Encode(prefill, /*add_bos=*/false, /*parse_special=*/false);
    prompt->insert(prompt->end(), more.begin(), more.end());
    if (prompt->size() >= host.context) {
      *e = Err(413, "messages: the prompt has " + std::to_string(prompt->size()) +
                        " tokens; this model's maximum context length is " +
                        std::to_string(host.context) +
                        " tokens (prompt and completion together)",
               "messages");
      ok = false;
    }
  }
  if (large) {
    r->chat.messages.clear();
    r->chat.messages.shrink_to_fit();
    malloc_trim(0);
  }
  return ok;
}

}  // namespace

void RefuseMethod(MessagesHost& host, Exchange& x, const std::string& what) {
  x.Reply(405, "application/json",
          AnthropicErrorJson(Err(405, "method not allowed: " + what + "; use POST")),
          {{"Allow", "POST"}});
  host.metrics->Request("other", 405);
}

void ServeCountTokens(MessagesHost& host, Exchange& x) {
  static const char* kEp = "count_tokens";
  ApiError e;
  std::shared_ptr<void> flight = host.admit(&e);
  if (flight == nullptr) return Reply(host, x, kEp, e);
  MessagesRequest r;
  std::vector<int32_t> prompt;
  if (!Prepare(host, x, /*count_tokens=*/true, &r, &prompt, &e)) return Reply(host, x, kEp, e);
  x.Reply(200, "application/json", CountTokensJson(static_cast<uint32_t>(prompt.size())));
  host.metrics->Request(kEp, 200);
}

void ServeMessages(MessagesHost& host, Exchange& x) {
  static const char* kEp = "messages";
  ApiError e;
  std::shared_ptr<void> flight = host.admit(&e);
  if (flight == nullptr) return Reply(host, x, kEp, e);
  MessagesRequest r;
  EngineRequest er;
  if (!Prepare(host, x, /*count_tokens=*/false, &r, &er.prompt, &e)) {
    return Reply(host, x, kEp, e);
  }
  const uint32_t room = host.context - static_cast<uint32_t>(er.prompt.size());
  if (*r.chat.max_tokens > room) {
    return Reply(host, x, kEp,
                 Err(400,
                     "max_tokens: " + std::to_string(*r.chat.max_tokens) +
                         " is too many: the prompt has " + std::to_string(er.prompt.size()) +
                         " tokens and this model's maximum context length is " +
                         std::to_string(host.context) + " tokens, so at most " +
                         std::to_string(room) + " can be generated",
                     "max_tokens"));
  }
  er.max_tokens = *r.chat.max_tokens;
  er.sampling = r.chat.sampling;
  er.sampling.seed = host.seed();
  er.stop_tokens = host.stop_tokens;
  if (r.chat.json_grammar && host.constraint) er.constraint = host.constraint(r.chat);
  CompletionInfo info;
  {
    char id[48];
    std::snprintf(id, sizeof(id), "msg_%016llx%08llx",
                  static_cast<unsigned long long>(er.sampling.seed),
                  static_cast<unsigned long long>(++host.ids));
    info.id = id;
  }
  info.model = host.model_id;
  info.prompt_tokens = static_cast<uint32_t>(er.prompt.size());
  Result<std::unique_ptr<Generation>> started =
      Generation::Start(*host.engine, *host.tokenizer, std::move(er), r.chat.stop);
  if (!started.ok()) return Reply(host, x, kEp, FromStatus(started.status()));
  std::unique_ptr<Generation> g = std::move(*started);
  auto finish_log = [&](bool client_gone, bool cut) {
    const std::string line = RecordEnd(*host.metrics, *g, info.id, kEp, client_gone, cut);
    if (host.log) host.log(line);
  };
  const ApiError shutdown_error =
      Err(503, "the server is shutting down: the request was cut at the drain deadline (" +
                   std::to_string(*host.drain_ms) + " ms)");
  auto fill_usage = [&] {
    info.cached_tokens = g->cached_tokens();
    info.completion_tokens = g->completion_tokens();
  };

  if (!r.chat.stream) {
    std::string text;
    bool gone = false, cut = false;
    PumpToEnd(*g, x, *host.aborting, &text, &gone, &cut);
    finish_log(gone, cut);
    if (cut) return Reply(host, x, kEp, shutdown_error);
    if (g->finish_reason() == "error") return Reply(host, x, kEp, FromStatus(g->error()));
    fill_usage();
    if (r.chat.tools) {
      ToolCallStream calls(host.tool_syntax, r.chat.tools.get());
      text = calls.Push(text);
      ToolParse p = calls.Flush();
      text += p.content;
      x.Reply(200, "application/json",
              ToolUseMessageJson(info, text, StopReason(g->finish_reason(), g->stop_sequence()),
                                 g->stop_sequence(), WithIds(p.calls, "toolu_")));
      host.metrics->Request(kEp, gone ? 499 : 200);
      return;
    }
    x.Reply(200, "application/json",
            MessageJson(info, text, StopReason(g->finish_reason(), g->stop_sequence()),
                        g->stop_sequence()));
    host.metrics->Request(kEp, gone ? 499 : 200);
    return;
  }

  // Streaming: message_start waits for the first event, which tells how much of the prompt
  // the prefix cache held (its usage reports it).
  host.metrics->Request(kEp, 200);
  x.StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"},
                                          {"X-Accel-Buffering", "no"}});
  bool gone = false, cut = false, begun = false;
  auto send = [&](const std::string& event) {
    if (gone) return;
    if (!x.Write(event)) {
      gone = true;
      g->Cancel();
    }
  };
  auto begin = [&] {
    if (begun) return;
    begun = true;
    fill_usage();
    send(MessageStartEvent(info));
    send(ContentBlockStartEvent());
    send(PingEvent());
  };
  std::string text;
  std::optional<ToolCallStream> tool_stream;
  if (r.chat.tools) tool_stream.emplace(host.tool_syntax, r.chat.tools.get());
  std::vector<ToolCallOut> calls;
  for (;;) {
    const bool end = g->Pump(50, &text);
    if (end || !text.empty() || g->completion_tokens() > 0) begin();
    if (tool_stream) {
      text = tool_stream->Push(text);
      if (end) {
        ToolParse p = tool_stream->Flush();
        text += p.content;
        calls = WithIds(p.calls, "toolu_");
      }
    }
    if (!text.empty()) {
      send(TextDeltaEvent(text));
      text.clear();
    }
    if (end) break;
    CancelIfEnded(*g, x, *host.aborting, &gone, &cut);  // a cut is told below
  }
  finish_log(gone, cut);
  if (gone) return;
  if (cut) {
    send(ErrorEvent(shutdown_error));
  } else if (g->finish_reason() == "error") {
    send(ErrorEvent(FromStatus(g->error())));
  } else {
    fill_usage();
    send(ContentBlockStopEvent());
    for (size_t i = 0; i < calls.size(); ++i) {
      // Each call its own block after the text: start (input {}), the input's JSON in
      // pieces (split on UTF-8 boundaries), stop.
      send(ToolUseBlockStartEvent(i + 1, calls[i]));
      for (std::string_view piece : ArgumentPieces(calls[i].arguments)) {
        send(InputJsonDeltaEvent(i + 1, piece));
      }
      send(BlockStopEvent(i + 1));
    }
    send(MessageDeltaEvent(info,
                           calls.empty() ? StopReason(g->finish_reason(), g->stop_sequence())
                                         : std::string_view("tool_use"),
                           calls.empty() ? g->stop_sequence() : std::string()));
    send(MessageStopEvent());
  }
  x.End();
}

}  // namespace kvtier::server
