// UTF-8 helpers, GPT-2's byte-level mapping and the PCRE2 pre-tokenizers of byte-level BPE.
// Thread safety: the mapping tables are built once (function-local statics); PreTokenizer is
// immutable after Create and allocates its match data per Split call.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer_internal.h"

namespace kvtier::tokenizer_internal {

size_t Utf8CharLen(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  size_t n = 0;
  uint32_t min = 0;
  if (b < 0x80) return 1;
  if ((b & 0xE0) == 0xC0) {
    n = 2;
    min = 0x80;
  } else if ((b & 0xF0) == 0xE0) {
    n = 3;
    min = 0x800;
  } else if ((b & 0xF8) == 0xF0) {
    n = 4;
    min = 0x10000;
  } else {
    return 1;
  }
  if (i + n > s.size()) return 1;
  uint32_t cp = b & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) return 1;
    cp = (cp << 6) | (c & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 1;
  return n;
}

size_t IncompleteUtf8Tail(std::string_view s) {
  // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto b = static_cast<unsigned char>(s[n - back]);
    if ((b & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    size_t need = 0;
    if ((b & 0xE0) == 0xC0) {
      need = 2;
    } else if ((b & 0xF0) == 0xE0) {
      need = 3;
    } else if ((b & 0xF8) == 0xF0) {
      need = 4;
    }
    return need > back ? back : 0;
  }
  return 0;
}

void AppendUtf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {

// Printable Latin-1 bytes map to themselves; the other 68 bytes, in increasing order, to
// U+0100, U+0101, ... (so every byte becomes one visible, non-space code point).
std::array<uint32_t, 256> BuildByteMap() {
  std::array<uint32_t, 256> map{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    map[b] = printable ? b : next++;
  }
  return map;
}

}  // namespace

const std::array<uint32_t, 256>& ByteToCodepoint() {
  static const std::array<uint32_t, 256> map = BuildByteMap();
  return map;
}

int CodepointToByte(uint32_t cp) {
  static const std::vector<int> inverse = [] {
    std::vector<int> inv(512, -1);
    const auto& fwd = ByteToCodepoint();
    for (int b = 0; b < 256; ++b) inv[fwd[b]] = b;
    return inv;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

std::string ByteLevelEncode(std::string_view bytes) {
  const auto& map = ByteToCodepoint();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) AppendUtf8(&out, map[static_cast<unsigned char>(c)]);
  return out;
}

namespace {

// The white space of the reference tokenizers (Unicode White_Space), written out so that PCRE2's
// own notion of \s (which adds U+180E) does not leak in. {WS} in a pattern below is replaced by
// this set's inside (usable within [...]).
constexpr std::string_view kWhiteSpace =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

std::string Expand(std::string_view pattern) {
  std::string out;
  for (size_t i = 0; i < pattern.size();) {
    if (pattern.substr(i, 4) == "{WS}") {
      out.append(kWhiteSpace);
      i += 4;
    } else {
      out.push_back(pattern[i++]);
    }
  }
  return out;
}

// GPT-2 (OpenAI's original pattern).
constexpr std::string_view kGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^{WS}\\p{L}\\p{N}]+|[{WS}]+(?![^{WS}])|[{WS}]+";
// Llama 3 (cl100k-style: case-insensitive contractions, numbers in groups of at most three).
constexpr std::string_view kLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^{WS}\\p{L}\\p{N}]+[\\r\\n]*|[{WS}]*[\\r\\n]+|[{WS}]+(?![^{WS}])|[{WS}]+";
// Qwen 2: as Llama 3 but every digit alone.
constexpr std::string_view kQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^{WS}\\p{L}\\p{N}]+[\\r\\n]*|[{WS}]*[\\r\\n]+|[{WS}]+(?![^{WS}])|[{WS}]+";

struct PreFamily {
  std::vector<std::string_view> names;
  std::vector<std::string_view> patterns;
  bool ignore_merges;
  bool add_bos;
};

const std::vector<PreFamily>& Families() {
  static const std::vector<PreFamily> families = {
      {{"default"},
       {"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2, "\\p{N}+", "[0-9][0-9][0-9]"},
       false,
       false},
      {{"gpt-2", "gpt2", "phi-2", "roberta-bpe", "mpt", "olmo", "jais"}, {kGpt2}, false, false},
      {{"llama-bpe", "llama3", "llama-v3", "falcon3"}, {kLlama3}, true, true},
      {{"dbrx", "smaug-bpe"}, {kLlama3}, false, false},
      {{"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"}, {kQwen2}, false, false},
      {{"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"},
       {"\\p{N}", kGpt2},
       false,
       false},
  };
  return families;
}

}  // namespace

std::string SupportedPreTokenizers() {
  std::string out;
  for (const PreFamily& f : Families()) {
    for (std::string_view n : f.names) {
      if (!out.empty()) out += ", ";
      out += n;
    }
  }
  return out;
}

Result<std::unique_ptr<PreTokenizer>> PreTokenizer::Create(std::string_view pre) {
  const PreFamily* family = nullptr;
  const std::string_view name = pre.empty() ? std::string_view("default") : pre;
  for (const PreFamily& f : Families()) {
    for (std::string_view n : f.names) {
      if (n == name) family = &f;
    }
  }
  if (family == nullptr) {
    std::string msg = "tokenizer.ggml.pre: unsupported pre-tokenizer '";
    msg += pre;
    msg += "' (supported: ";
    msg += SupportedPreTokenizers();
    msg += ")";
    return Status::InvalidArgument(std::move(msg));
  }
  std::unique_ptr<PreTokenizer> p(new PreTokenizer());
  p->ignore_merges_ = family->ignore_merges;
  p->add_bos_ = family->add_bos;
  for (std::string_view pattern : family->patterns) {
    const std::string expanded = Expand(pattern);
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(expanded.c_str()),
                                     expanded.size(), PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF,
                                     &err, &err_offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(err, buf, sizeof buf);
      std::string msg = "pre-tokenizer '";
      msg += name;
      msg += "': pattern does not compile at offset ";
      msg += std::to_string(err_offset);
      msg += ": ";
      msg += reinterpret_cast<const char*>(buf);
      return Status::Internal(std::move(msg));
    }
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // interpreter fallback if JIT is absent
    p->codes_.push_back(code);
  }
  return p;
}

PreTokenizer::~PreTokenizer() {
  for (void* c : codes_) pcre2_code_free(static_cast<pcre2_code*>(c));
}

std::vector<std::string_view> PreTokenizer::Split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (!text.empty()) pieces.push_back(text);
  for (void* c : codes_) {
    auto* code = static_cast<pcre2_code*>(c);
    std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
        pcre2_match_data_create_from_pattern(code, nullptr), pcre2_match_data_free);
    std::vector<std::string_view> next;
    next.reserve(pieces.size() * 2);
    for (std::string_view piece : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t pos = 0;  // start of the text not yet emitted
      size_t from = 0;
      while (from < piece.size()) {
        const int rc = pcre2_match(code, subject, piece.size(), from, 0, md.get(), nullptr);
        if (rc < 0) break;  // no further match (errors are treated alike: the rest is one gap)
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        const size_t begin = ov[0];
        const size_t end = ov[1];
        if (end <= begin) {  // empty match: step over one character
          from = begin + Utf8CharLen(piece, begin);
          continue;
        }
        if (begin > pos) next.push_back(piece.substr(pos, begin - pos));
        next.push_back(piece.substr(begin, end - begin));
        pos = from = end;
      }
      if (pos < piece.size()) next.push_back(piece.substr(pos));
    }
    pieces = std::move(next);
  }
  return pieces;
}

}  // namespace kvtier::tokenizer_internal
