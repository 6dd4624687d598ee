// HTTP request head parsing (server/http_parse.h).
#include "server/http_parse.h"

#include <algorithm>
#include <cctype>

namespace kvtier::server {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool IsToken(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u <= 32 || u >= 127 || std::string_view("()<>@,;:\\\"/[]?={}").find(c) != std::string_view::npos) {
      return false;
    }
  }
  return true;
}

// Printable text for an error message: at most 40 bytes, control bytes as '?'.
std::string Quote(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 40)) out += (static_cast<unsigned char>(c) < 32 || c == 127) ? '?' : c;
  if (s.size() > 40) out += "...";
  return out + "'";
}

ParseState Fail(ParseError* e, int status, std::string m) {
  e->status = status;
  e->message = std::move(m);
  return ParseState::kError;
}

}  // namespace

std::string_view HttpHead::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return v;
  }
  return {};
}

ParseState ParseHead(std::string_view buf, const HttpLimits& limits, HttpHead* head,
                     ParseError* error) {
  // Leading empty lines before a request line are allowed (RFC 9112 2.2).
  size_t start = 0;
  while (start + 1 < buf.size() && buf[start] == '\r' && buf[start + 1] == '\n') start += 2;
  const size_t line_end = buf.find("\r\n", start);
  if (line_end == std::string_view::npos) {
    if (buf.size() - start > limits.max_line) {
      return Fail(error, 414, "URI too long: the request line is longer than " +
                                  std::to_string(limits.max_line) + " bytes");
    }
    return ParseState::kNeedMore;
  }
  if (line_end - start > limits.max_line) {
    return Fail(error, 414, "URI too long: the request line is " +
                                std::to_string(line_end - start) + " bytes; at most " +
                                std::to_string(limits.max_line) + " are accepted");
  }
  const size_t end = buf.find("\r\n\r\n", line_end);
  const size_t head_end = end == std::string_view::npos ? std::string_view::npos : end + 4;
  const size_t head_len = (end == std::string_view::npos ? buf.size() : head_end);
  if (head_len > limits.max_head) {
    return Fail(error, 431, "request header fields too large: the head is larger than " +
                                std::to_string(limits.max_head) + " bytes");
  }
  // The request line: METHOD SP TARGET SP HTTP/1.x
  const std::string_view line = buf.substr(start, line_end - start);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    return Fail(error, 400, "malformed request line " + Quote(line) +
                                ": expected 'METHOD /path HTTP/1.1'");
  }
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!IsToken(method)) return Fail(error, 400, "malformed method " + Quote(method));
  if (target.empty() || (target[0] != '/' && target != "*")) {
    return Fail(error, 400, "malformed request target " + Quote(target) + ": expected a path");
  }
  for (char c : target) {
    if (static_cast<unsigned char>(c) <= 32 || c == 127) {
      return Fail(error, 400, "malformed request target " + Quote(target));
    }
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return Fail(error, 505, "HTTP version " + Quote(version) +
                                " is not supported (HTTP/1.1 or HTTP/1.0)");
  }
  if (end == std::string_view::npos) return ParseState::kNeedMore;
  HttpHead h;
  h.method = std::string(method);
  h.target = std::string(target);
  h.path = h.target.substr(0, h.target.find('?'));
  h.minor = version.back() - '0';
  h.keep_alive = h.minor == 1;
  h.head_bytes = head_end;
  size_t pos = line_end + 2;
  bool have_length = false;
  while (pos < end + 2) {
    const size_t eol = buf.find("\r\n", pos);
    const std::string_view field = buf.substr(pos, eol - pos);
    pos = eol + 2;
    const size_t colon = field.find(':');
    if (colon == std::string_view::npos || !IsToken(field.substr(0, colon))) {
      return Fail(error, 400, "malformed header field " + Quote(field) +
                                  ": expected 'Name: value'");
    }
    if (h.headers.size() >= limits.max_headers) {
      return Fail(error, 431, "request header fields too large: more than " +
                                  std::to_string(limits.max_headers) + " fields");
    }
    std::string name = Lower(field.substr(0, colon));
    const std::string_view value = Trim(field.substr(colon + 1));
    for (char c : value) {
      if ((static_cast<unsigned char>(c) < 32 && c != '\t') || c == 127) {
        return Fail(error, 400, "header " + name + ": control byte in its value");
      }
    }
    if (name == "content-length") {
      // 1*DIGIT, nothing else (a sign, spaces inside or a second differing value is an error).
      uint64_t n = 0;
      bool ok = !value.empty() && value.size() <= 19;
      for (char c : value) ok = ok && c >= '0' && c <= '9';
      if (ok) {
        for (char c : value) n = n * 10 + static_cast<uint64_t>(c - '0');
      }
      if (!ok) {
        return Fail(error, 400, "Content-Length: " + Quote(value) +
                                    " is not a valid length (expected a number of bytes, 0 or "
                                    "more)");
      }
      if (have_length && n != h.content_length) {
        return Fail(error, 400, "Content-Length: two different values");
      }
      have_length = true;
      h.content_length = n;
    } else if (name == "transfer-encoding") {
      if (Lower(value) != "chunked") {
        return Fail(error, 501, "Transfer-Encoding: " + Quote(value) +
                                    " is not supported (only chunked)");
      }
      h.chunked = true;
    } else if (name == "connection") {
      const std::string v = Lower(value);
      if (v.find("close") != std::string::npos) h.keep_alive = false;
      if (v.find("keep-alive") != std::string::npos && h.minor == 0) h.keep_alive = true;
    } else if (name == "expect") {
      if (Lower(value) != "100-continue") {
        return Fail(error, 417, "Expect: " + Quote(value) + " is not supported");
      }
      h.expect_continue = true;
    }
    h.headers.emplace_back(std::move(name), std::string(value));
  }
  if (h.chunked && have_length) {
    return Fail(error, 400, "both Content-Length and Transfer-Encoding: chunked were sent");
  }
  if (h.content_length > limits.max_body) {
    return Fail(error, 413, "the request body is larger than " + std::to_string(limits.max_body) +
                                " bytes (Content-Length: " + std::to_string(h.content_length) +
                                ")");
  }
  *head = std::move(h);
  return ParseState::kDone;
}

ParseState DecodeChunked(std::string_view buf, uint64_t max_body, std::string* body,
                         size_t* consumed, ParseError* error) {
  std::string out;
  size_t pos = 0;
  for (;;) {
    const size_t eol = buf.find("\r\n", pos);
    if (eol == std::string_view::npos) {
      if (buf.size() - pos > 1024) return Fail(error, 400, "chunked body: chunk size line too long");
      return ParseState::kNeedMore;
    }
    std::string_view size_line = buf.substr(pos, eol - pos);
    size_line = Trim(size_line.substr(0, size_line.find(';')));
    uint64_t n = 0;
    if (size_line.empty() || size_line.size() > 15) {
      return Fail(error, 400, "chunked body: malformed chunk size " + Quote(size_line));
    }
    for (char c : size_line) {
      const int d = std::isxdigit(static_cast<unsigned char>(c))
                        ? (std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (c | 32) - 'a' + 10)
                        : -1;
      if (d < 0) return Fail(error, 400, "chunked body: malformed chunk size " + Quote(size_line));
      n = n * 16 + static_cast<uint64_t>(d);
    }
    if (out.size() + n > max_body) {
      return Fail(error, 413, "the request body is larger than " + std::to_string(max_body) +
                                  " bytes");
    }
    pos = eol + 2;
    if (n == 0) {
      // Trailers, then the final CRLF.
      for (;;) {
        const size_t t = buf.find("\r\n", pos);
        if (t == std::string_view::npos) return ParseState::kNeedMore;
        const bool last = t == pos;
        pos = t + 2;
        if (last) break;
      }
      *body = std::move(out);
      *consumed = pos;
      return ParseState::kDone;
    }
    if (buf.size() - pos < n + 2) return ParseState::kNeedMore;
    if (buf.substr(pos + n, 2) != "\r\n") return Fail(error, 400, "chunked body: missing CRLF after a chunk");
    out.append(buf.substr(pos, n));
    pos += n + 2;
  }
}

}  // namespace kvtier::server
