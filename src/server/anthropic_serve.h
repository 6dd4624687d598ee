// The handlers of POST /v1/messages and /v1/messages/count_tokens (the Anthropic Messages API).
// The server (server.cc) owns everything they use and lends it through MessagesHost: its
// admission (draining, overload, the in-flight count), its prompt builder (chat template,
// tokenizer, context bounds) and its engine, so that both APIs build the same prompts and share
// the prefix cache. A final assistant message is a prefill: the prompt is the conversation
// before it (ending where the answer starts) followed by its tokens, and the answer continues it.
//
// Thread safety: MessagesHost is filled once before the server listens and read-only after;
// each handler call runs on the HTTP worker thread serving its request.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/engine.h"
#include "kvtier/tokenizer.h"
#include "server/http_front.h"
#include "server/openai.h"
#include "server/server_metrics.h"
#include "server/tool_calls.h"

namespace kvtier::server {

struct MessagesHost {
  Engine* engine = nullptr;              // not owned
  const Tokenizer* tokenizer = nullptr;  // not owned
  ServerMetrics* metrics = nullptr;      // not owned
  std::string model_id;
  uint32_t context = 0;
  uint64_t max_token_bytes = 4;
  std::vector<int32_t> stop_tokens;
  const std::atomic<bool>* aborting = nullptr;  // the drain deadline passed: end now
  const uint32_t* drain_ms = nullptr;
  // Admits a request: a token held for its lifetime (the in-flight count), or null with
  // *error set (503: draining or overloaded).
  std::function<std::shared_ptr<void>(ApiError*)> admit;
  // The prompt tokens of a chat request (400 / 413 otherwise).
  std::function<bool(const ApiRequest&, std::vector<int32_t>*, ApiError*)> prompt;
  std::function<uint64_t()> seed;
  // The call syntax of the chat template, and the constraint of a request with a json_grammar
  // (a forced tool call).
  ToolSyntax tool_syntax;
  std::function<std::shared_ptr<LogitConstraint>(const ApiRequest&)> constraint;
  std::function<void(const std::string&)> log;
  std::atomic<uint64_t> ids{0};
};

void ServeMessages(MessagesHost& host, Exchange& x);
void ServeCountTokens(MessagesHost& host, Exchange& x);
// 405 for another method on those routes (`what`: "GET /v1/messages"), naming POST.
void RefuseMethod(MessagesHost& host, Exchange& x, const std::string& what);

}  // namespace kvtier::server
