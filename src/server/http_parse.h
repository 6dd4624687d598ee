// The HTTP/1.1 request head parser of the server's front (server/http_front.h): pure functions
// over bytes, no I/O, no allocation beyond the result, so it can be fuzzed (http_fuzz.cc) and
// tested alone. Bounded: a request line longer than `max_line` is 414, a head longer than
// `max_head` is 431, and a body declared larger than `max_body` is 413 before any of it is
// read. Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvtier::server {

struct HttpLimits {
  size_t max_line = 8192;       // request line (method, target, version)
  size_t max_head = 32768;      // request line and every header field
  size_t max_headers = 100;     // header fields
  uint64_t max_body = 16ull << 20;
};

struct HttpHead {
  std::string method;
  std::string target;  // as sent (path and query)
  std::string path;    // target without the query
  int minor = 1;       // HTTP/1.<minor>
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  size_t head_bytes = 0;           // bytes of the head, final CRLF CRLF included
  uint64_t content_length = 0;     // 0 when absent
  bool chunked = false;            // Transfer-Encoding: chunked
  bool keep_alive = true;          // HTTP/1.1 default, or Connection: keep-alive on 1.0
  bool expect_continue = false;    // Expect: 100-continue

  // The first value of header `name` (lower case), or "".
  std::string_view Header(std::string_view name) const;
};

enum class ParseState : uint8_t { kNeedMore, kDone, kError };

// An error's HTTP status and message (names the field, expected vs got).
struct ParseError {
  int status = 400;
  std::string message;
};

// Parses the head at the start of `buf`. kNeedMore: no complete head yet (and within limits);
// kDone: *head is set; kError: *error is set (the connection is answered and closed).
ParseState ParseHead(std::string_view buf, const HttpLimits& limits, HttpHead* head,
                     ParseError* error);

// Decodes a chunked body at the start of `buf` (RFC 9112 7.1; extensions and trailers
// skipped). kDone: *body holds it and *consumed the bytes it took; kError: a malformed chunk or
// more than `max_body` bytes of data (413).
ParseState DecodeChunked(std::string_view buf, uint64_t max_body, std::string* body,
                         size_t* consumed, ParseError* error);

}  // namespace kvtier::server
