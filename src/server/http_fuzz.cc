// libFuzzer target for the server's request parsers (issue 36): the HTTP head parser and the
// chunked body decoder (server/http_parse.h), the OpenAI request parser (server/openai.h) and
// the Anthropic Messages one (server/anthropic.h, on the same bytes as the OpenAI one).
// Any byte string must give a parse or an error, never crash, hang or read outside the input;
// a head that parses is checked for consistency (its length within the input, its body within
// the limit). Built as `kvtier_http_fuzz` with clang and -DKVTIER_BUILD_FUZZ=ON:
//   build/fuzz/src/server/kvtier_http_fuzz -max_len=8192 CORPUS_DIR
// The first byte picks the parser. Thread safety: stateless.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/anthropic.h"
#include "server/http_parse.h"
#include "server/openai.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t pick = data[0] % 4;
  const std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
  using namespace kvtier::server;
  if (pick == 0 || pick == 1) {
    HttpLimits limits;
    limits.max_line = 512;
    limits.max_head = 2048;
    limits.max_headers = 16;
    limits.max_body = 4096;
    HttpHead head;
    ParseError error;
    const ParseState s = ParseHead(in, limits, &head, &error);
    if (s == ParseState::kDone) {
      if (head.head_bytes > in.size() || head.content_length > limits.max_body) __builtin_trap();
      if (head.path.empty() || head.method.empty()) __builtin_trap();
      if (head.chunked) {
        std::string body;
        size_t used = 0;
        ParseError e2;
        if (DecodeChunked(in.substr(head.head_bytes), limits.max_body, &body, &used, &e2) ==
                ParseState::kDone &&
            (used > in.size() - head.head_bytes || body.size() > limits.max_body)) {
          __builtin_trap();
        }
      }
    } else if (s == ParseState::kError) {
      if (error.status < 400 || error.status > 599 || error.message.empty()) __builtin_trap();
    }
    return 0;
  }
  ApiRequest r;
  ApiError e;
  const Endpoint ep = pick == 2 ? Endpoint::kChat : Endpoint::kCompletion;
  if (!ParseRequest(ep, in, &r, &e, 4096, 128)) {
    if (e.status < 400 || e.message.empty()) __builtin_trap();
  }
  MessagesRequest m;
  if (!ParseMessagesRequest(in, /*count_tokens=*/pick == 3, &m, &e, 4096, 128)) {
    if (e.status < 400 || e.message.empty()) __builtin_trap();
  } else if (m.chat.messages.empty() || (pick != 3 && !m.chat.max_tokens)) {
    __builtin_trap();
  }
  return 0;
}
