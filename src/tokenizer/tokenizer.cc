// Tokenizer: validation of the vocabulary metadata, special-token partitioning, Encode/Decode,
// and StreamDecoder. The segmenters live in tokenizer_segment.cc, UTF-8 and the pre-tokenizer
// regexes in tokenizer_text.cc.
// Thread safety: a Tokenizer is immutable after FromVocab; StreamDecoder is thread-compatible.
#include "kvtier/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvtier/gguf.h"
#include "tokenizer/tokenizer_internal.h"

namespace kvtier {

using tokenizer_internal::CodepointToByte;
using tokenizer_internal::Utf8CharLen;

std::string_view TokenizerKindName(TokenizerKind k) {
  return k == TokenizerKind::kSpm ? "spm" : "bpe";
}

namespace {

constexpr std::string_view kSpmSpace = "\xe2\x96\x81";  // U+2581 '▁'

// Token texts that end generation whatever the metadata says (as llama.cpp recognises them).
constexpr std::string_view kEogNames[] = {"<|eot_id|>", "<|im_end|>",   "<|end|>",
                                          "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
                                          "<EOT>"};
constexpr std::string_view kEotNames[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                          "<|endoftext|>", "<EOT>"};

// Concatenation without `"literal" + std::string` (GCC 12 -Wrestrict false positives).
template <typename... A>
std::string Cat(const A&... a) {
  std::string s;
  (s.append(std::string_view(a)), ...);
  return s;
}

std::string Quote(std::string_view s) { return Cat("'", s, "'"); }

Status Invalid(std::string_view key, const std::string& what) {
  std::string msg(key);
  msg += ": ";
  msg += what;
  return Status::InvalidArgument(std::move(msg));
}

std::string KeyAt(std::string_view key, size_t i) {
  std::string out(key);
  out += "[";
  out += std::to_string(i);
  out += "]";
  return out;
}

// "<0x0A>" -> 10; -1 when `t` is not of that form.
int ParseByteToken(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  int v = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = t[i];
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  size_t pos = 0;
  for (;;) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s.substr(pos));
  return out;
}

// Byte-level BPE text back to bytes; a code point outside the mapping is kept as UTF-8.
std::string ByteLevelDecode(std::string_view t) {
  std::string out;
  for (size_t i = 0; i < t.size();) {
    const size_t n = Utf8CharLen(t, i);
    uint32_t cp = static_cast<unsigned char>(t[i]);
    if (n > 1) {
      cp &= 0x7Fu >> n;
      for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(t[i + k]) & 0x3F);
    }
    const int b = n == 1 && cp >= 0x80 ? -1 : CodepointToByte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(t.substr(i, n));
    }
    i += n;
  }
  return out;
}

// Checks an optional special-token id. Out of range: an error for the ids encoding depends on,
// a warning (and no such token) for the others.
Status CheckId(const std::optional<int64_t>& v, std::string_view key, size_t n, bool required,
               int32_t* id, std::vector<std::string>* warnings) {
  if (!v.has_value()) return Status::OK();
  if (*v >= 0 && static_cast<uint64_t>(*v) < n) {
    *id = static_cast<int32_t>(*v);
    return Status::OK();
  }
  const std::string what = Cat("token id ", std::to_string(*v), " is out of range (vocabulary of ",
                               std::to_string(n), " tokens)");
  if (required) return Invalid(key, what);
  warnings->push_back(Cat(key, ": ", what, "; ignored"));
  *id = -1;
  return Status::OK();
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromVocab(TokenizerVocab v) {
  auto impl = std::make_unique<Impl>();
  Impl& t = *impl;
  if (v.model == "llama") {
    t.kind = TokenizerKind::kSpm;
  } else if (v.model == "gpt2") {
    t.kind = TokenizerKind::kBpe;
  } else if (v.model.empty()) {
    return Invalid("tokenizer.ggml.model", "missing");
  } else {
    return Invalid("tokenizer.ggml.model",
                   Cat("unsupported tokenizer model ", Quote(v.model), " (supported: llama, gpt2)"));
  }
  const size_t n = v.tokens.size();
  if (n == 0) return Invalid("tokenizer.ggml.tokens", "missing or empty");
  if (n > static_cast<size_t>(INT32_MAX)) return Invalid("tokenizer.ggml.tokens", "too many tokens");
  if (!v.scores.empty() && v.scores.size() != n) {
    return Invalid("tokenizer.ggml.scores", Cat(std::to_string(v.scores.size()),
                                                " entries, but tokenizer.ggml.tokens has ",
                                                std::to_string(n)));
  }
  if (!v.token_types.empty() && v.token_types.size() != n) {
    return Invalid("tokenizer.ggml.token_type", Cat(std::to_string(v.token_types.size()),
                                                    " entries, but tokenizer.ggml.tokens has ",
                                                    std::to_string(n)));
  }

  t.text = std::move(v.tokens);
  t.score = v.scores.empty() ? std::vector<float>(n, 0.0f) : std::move(v.scores);
  t.type.assign(n, TokenType::kNormal);
  t.to_id.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (!v.token_types.empty()) {
      const int32_t ty = v.token_types[i];
      if (ty < 0 || ty > static_cast<int32_t>(TokenType::kByte)) {
        return Invalid(KeyAt("tokenizer.ggml.token_type", i),
                       Cat("unknown token type ", std::to_string(ty)));
      }
      t.type[i] = static_cast<TokenType>(ty);
    }
    if (t.text[i].empty()) {
      t.text[i] = Cat("[EMPTY_", std::to_string(i), "]");
      t.warnings.push_back(Cat(KeyAt("tokenizer.ggml.tokens", i), ": empty token, renamed ",
                               t.text[i]));
    }
    const auto [it, inserted] = t.to_id.emplace(t.text[i], static_cast<int32_t>(i));
    if (!inserted) {
      return Invalid(KeyAt("tokenizer.ggml.tokens", i),
                     Cat("duplicate token ", Quote(t.text[i]), " (also id ",
                         std::to_string(it->second), ")"));
    }
  }

  // Special ids, with the defaults of each model family.
  if (t.kind == TokenizerKind::kSpm) {
    t.unk = n > 0 ? 0 : -1;
    t.bos = n > 1 ? 1 : -1;
    t.eos = n > 2 ? 2 : -1;
  }
  KVTIER_RETURN_IF_ERROR(CheckId(v.bos_id, "tokenizer.ggml.bos_token_id", n, true, &t.bos, &t.warnings));
  KVTIER_RETURN_IF_ERROR(CheckId(v.eos_id, "tokenizer.ggml.eos_token_id", n, true, &t.eos, &t.warnings));
  KVTIER_RETURN_IF_ERROR(CheckId(v.unk_id, "tokenizer.ggml.unknown_token_id", n, true, &t.unk, &t.warnings));
  KVTIER_RETURN_IF_ERROR(CheckId(v.eot_id, "tokenizer.ggml.eot_token_id", n, false, &t.eot, &t.warnings));
  KVTIER_RETURN_IF_ERROR(CheckId(v.eom_id, "tokenizer.ggml.eom_token_id", n, false, &t.eom, &t.warnings));
  KVTIER_RETURN_IF_ERROR(CheckId(v.pad_id, "tokenizer.ggml.padding_token_id", n, false, &t.pad, &t.warnings));

  t.byte_token.fill(-1);
  if (t.kind == TokenizerKind::kSpm) {
    t.add_bos = true;
    t.add_space_prefix = true;
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      const auto it = t.to_id.find(std::string_view(name));
      if (it != t.to_id.end()) t.byte_token[b] = it->second;
    }
    for (size_t i = 0; i < n; ++i) {
      if (t.type[i] == TokenType::kByte && ParseByteToken(t.text[i]) < 0) {
        return Invalid(KeyAt("tokenizer.ggml.tokens", i),
                       Cat("byte token ", Quote(t.text[i]), " is not of the form <0xNN>"));
      }
    }
  } else {
    auto pretok = tokenizer_internal::PreTokenizer::Create(v.pre);
    if (!pretok.ok()) return pretok.status();
    t.pretok = std::move(pretok).value();
    t.pre = v.pre.empty() ? "default" : v.pre;
    if (v.pre.empty()) t.warnings.push_back("tokenizer.ggml.pre: missing, using 'default'");
    t.ignore_merges = t.pretok->ignore_merges();
    t.add_bos = t.pretok->add_bos();
    const auto& map = tokenizer_internal::ByteToCodepoint();
    for (int b = 0; b < 256; ++b) {
      std::string s;
      tokenizer_internal::AppendUtf8(&s, map[b]);
      const auto it = t.to_id.find(s);
      if (it != t.to_id.end()) t.byte_token[b] = it->second;
    }
    // An empty merge list is valid: every byte stays a token of its own.
    t.merge_rank.reserve(v.merges.size());
    for (size_t i = 0; i < v.merges.size(); ++i) {
      const std::string& m = v.merges[i];
      const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
      if (sp == std::string::npos) {
        return Invalid(KeyAt("tokenizer.ggml.merges", i),
                       Cat(Quote(m), " is not two tokens separated by a space"));
      }
      const std::string_view left = std::string_view(m).substr(0, sp);
      const std::string_view right = std::string_view(m).substr(sp + 1);
      std::string joined(left);
      joined += right;
      for (std::string_view side : {left, right, std::string_view(joined)}) {
        if (t.to_id.find(side) == t.to_id.end()) {
          return Invalid(KeyAt("tokenizer.ggml.merges", i),
                         Cat(Quote(m), ": ", Quote(side), " is not in tokenizer.ggml.tokens"));
        }
      }
      std::string key(left);
      key.push_back('\x1f');
      key.append(right);
      t.merge_rank.emplace(std::move(key), static_cast<int32_t>(i));  // first rank wins
    }
  }
  if (t.kind == TokenizerKind::kSpm) t.pre = v.pre.empty() ? "default" : v.pre;
  if (v.add_bos.has_value()) t.add_bos = *v.add_bos;
  if (v.add_eos.has_value()) t.add_eos = *v.add_eos;
  if (v.add_space_prefix.has_value() && t.kind == TokenizerKind::kSpm) {
    t.add_space_prefix = *v.add_space_prefix;
  }
  t.chat_template = std::move(v.chat_template);

  // End of generation: named tokens (forced to control so that they parse as special), plus
  // eos / eot / eom.
  t.eog.assign(n, false);
  if (t.eot < 0) {
    for (std::string_view name : kEotNames) {
      const auto it = t.to_id.find(name);
      if (it != t.to_id.end()) {
        t.eot = it->second;
        break;
      }
    }
  }
  for (std::string_view name : kEogNames) {
    const auto it = t.to_id.find(name);
    if (it == t.to_id.end()) continue;
    t.eog[it->second] = true;
    t.type[it->second] = TokenType::kControl;
  }
  for (int32_t id : {t.eos, t.eot, t.eom}) {
    if (id >= 0) t.eog[id] = true;
  }

  // Tokens matched in the raw text before segmentation, longest first.
  for (size_t i = 0; i < n; ++i) {
    const TokenType ty = t.type[i];
    if (ty == TokenType::kControl || ty == TokenType::kUserDefined || ty == TokenType::kUnknown) {
      t.special.push_back(static_cast<int32_t>(i));
    }
  }
  std::stable_sort(t.special.begin(), t.special.end(), [&t](int32_t a, int32_t b) {
    return t.text[a].size() > t.text[b].size();
  });

  // Pieces.
  t.piece.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& s = t.text[i];
    switch (t.type[i]) {
      case TokenType::kControl:
      case TokenType::kUnknown:
      case TokenType::kUserDefined:
      case TokenType::kUnused:
        t.piece[i] = s;
        break;
      case TokenType::kByte:
        if (t.kind == TokenizerKind::kSpm) {
          t.piece[i] = std::string(1, static_cast<char>(ParseByteToken(s)));
        } else {
          t.piece[i] = ByteLevelDecode(s);
        }
        break;
      case TokenType::kNormal:
      case TokenType::kUndefined:
        t.piece[i] = t.kind == TokenizerKind::kSpm ? ReplaceAll(s, kSpmSpace, " ")
                                                   : ByteLevelDecode(s);
        break;
    }
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_bos,
                                       bool parse_special) const {
  const Impl& t = *impl_;
  // Fragments: raw text, or a token found in it.
  struct Fragment {
    int32_t id;  // -1: raw text
    std::string_view text;
  };
  std::vector<Fragment> frags;
  if (!text.empty()) frags.push_back({-1, text});
  std::vector<Fragment> next;
  for (const int32_t sid : t.special) {
    const TokenType ty = t.type[sid];
    if (!parse_special && (ty == TokenType::kControl || ty == TokenType::kUnknown)) continue;
    const std::string_view st = t.text[sid];
    bool any = false;
    for (const Fragment& f : frags) {
      if (f.id < 0 && f.text.find(st) != std::string_view::npos) any = true;
    }
    if (!any) continue;
    next.clear();
    for (const Fragment& f : frags) {
      if (f.id >= 0) {
        next.push_back(f);
        continue;
      }
      std::string_view rest = f.text;
      for (size_t hit; (hit = rest.find(st)) != std::string_view::npos;) {
        if (hit > 0) next.push_back({-1, rest.substr(0, hit)});
        next.push_back({sid, st});
        rest.remove_prefix(hit + st.size());
      }
      if (!rest.empty()) next.push_back({-1, rest});
    }
    frags.swap(next);
  }

  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && t.bos >= 0) out.push_back(t.bos);
  bool prev_special = true;  // SPM: the first text, and text after a special token, get a space
  std::string buf;
  for (const Fragment& f : frags) {
    if (f.id >= 0) {
      out.push_back(f.id);
      prev_special = true;
      continue;
    }
    if (t.kind == TokenizerKind::kSpm) {
      buf.clear();
      if (t.add_space_prefix && prev_special) buf.push_back(' ');
      buf.append(f.text);
      buf = ReplaceAll(buf, " ", kSpmSpace);
      t.EncodeSpm(buf, &out);
    } else {
      t.EncodeBpe(f.text, &out);
    }
    prev_special = false;
  }
  return out;
}

std::string Tokenizer::TokenPiece(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->piece.size()) return {};
  return impl_->piece[id];
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool render_special) const {
  const Impl& t = *impl_;
  std::string out;
  size_t i = 0;
  if (!ids.empty() && t.bos >= 0 && ids[0] == t.bos) {  // a leading BOS keeps the strip pending
    if (render_special || !IsControl(t.bos)) out.append(t.piece[t.bos]);
    i = 1;
  }
  bool strip = t.kind == TokenizerKind::kSpm && t.add_space_prefix;
  for (; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || static_cast<size_t>(id) >= t.piece.size()) continue;
    const bool first = strip;
    strip = false;
    if (IsControl(id) && !render_special) continue;
    std::string_view p = t.piece[id];
    if (first && !p.empty() && p[0] == ' ') p.remove_prefix(1);
    out.append(p);
  }
  return out;
}

TokenizerKind Tokenizer::kind() const { return impl_->kind; }
const std::string& Tokenizer::pre() const { return impl_->pre; }
size_t Tokenizer::vocab_size() const { return impl_->text.size(); }
int32_t Tokenizer::bos_id() const { return impl_->bos; }
int32_t Tokenizer::eos_id() const { return impl_->eos; }
int32_t Tokenizer::eot_id() const { return impl_->eot; }
int32_t Tokenizer::unk_id() const { return impl_->unk; }
bool Tokenizer::add_bos_default() const { return impl_->add_bos && impl_->bos >= 0; }
bool Tokenizer::add_space_prefix() const { return impl_->add_space_prefix; }
const std::string& Tokenizer::chat_template() const { return impl_->chat_template; }
const std::vector<std::string>& Tokenizer::warnings() const { return impl_->warnings; }

bool Tokenizer::IsEndOfGeneration(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->eog.size() && impl_->eog[id];
}

bool Tokenizer::IsControl(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->type.size()) return false;
  const TokenType ty = impl_->type[id];
  return ty == TokenType::kControl || ty == TokenType::kUnknown || ty == TokenType::kUnused;
}

const std::string& Tokenizer::TokenText(int32_t id) const {
  static const std::string kEmpty;
  if (id < 0 || static_cast<size_t>(id) >= impl_->text.size()) return kEmpty;
  return impl_->text[id];
}

int32_t Tokenizer::FindToken(std::string_view text) const {
  const auto it = impl_->to_id.find(text);
  return it == impl_->to_id.end() ? -1 : it->second;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& gguf) {
  TokenizerVocab v;
  // A key that is absent gives NotFound; any other failure (wrong type) is returned as is.
  auto optional = [](auto result, auto* dst) -> Status {
    if (result.ok()) {
      *dst = std::move(result).value();
      return Status::OK();
    }
    if (result.status().code() == StatusCode::kNotFound) return Status::OK();
    return Status::InvalidArgument(result.status().message());
  };
  KVTIER_RETURN_IF_ERROR(optional(gguf.GetString("tokenizer.ggml.model"), &v.model));
  if (v.model.empty() && !gguf.Has("tokenizer.ggml.model")) {
    return Invalid("tokenizer.ggml.model", Cat("missing: ", gguf.path(), " has no tokenizer"));
  }
  KVTIER_RETURN_IF_ERROR(optional(gguf.GetString("tokenizer.ggml.pre"), &v.pre));
  if (!gguf.Has("tokenizer.ggml.tokens")) return Invalid("tokenizer.ggml.tokens", "missing");
  KVTIER_RETURN_IF_ERROR(optional(gguf.GetStringArray("tokenizer.ggml.tokens"), &v.tokens));
  KVTIER_RETURN_IF_ERROR(optional(gguf.GetFloatArray("tokenizer.ggml.scores"), &v.scores));
  std::vector<int64_t> types;
  KVTIER_RETURN_IF_ERROR(optional(gguf.GetIntArray("tokenizer.ggml.token_type"), &types));
  v.token_types.reserve(types.size());
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] < INT32_MIN || types[i] > INT32_MAX) {
      return Invalid(KeyAt("tokenizer.ggml.token_type", i),
                     Cat("unknown token type ", std::to_string(types[i])));
    }
    v.token_types.push_back(static_cast<int32_t>(types[i]));
  }
  KVTIER_RETURN_IF_ERROR(optional(gguf.GetStringArray("tokenizer.ggml.merges"), &v.merges));
  if (v.model == "gpt2" && !gguf.Has("tokenizer.ggml.merges")) {
    return Invalid("tokenizer.ggml.merges", "missing (model gpt2 needs it; it may be empty)");
  }
  struct IdKey {
    const char* key;
    std::optional<int64_t>* dst;
  };
  for (const IdKey& k : {IdKey{"tokenizer.ggml.bos_token_id", &v.bos_id},
                         IdKey{"tokenizer.ggml.eos_token_id", &v.eos_id},
                         IdKey{"tokenizer.ggml.eot_token_id", &v.eot_id},
                         IdKey{"tokenizer.ggml.eom_token_id", &v.eom_id},
                         IdKey{"tokenizer.ggml.unknown_token_id", &v.unk_id},
                         IdKey{"tokenizer.ggml.padding_token_id", &v.pad_id}}) {
    int64_t id = 0;
    if (!gguf.Has(k.key)) continue;
    KVTIER_RETURN_IF_ERROR(optional(gguf.GetInt(k.key), &id));
    *k.dst = id;
  }
  struct BoolKey {
    const char* key;
    std::optional<bool>* dst;
  };
  for (const BoolKey& k : {BoolKey{"tokenizer.ggml.add_bos_token", &v.add_bos},
                           BoolKey{"tokenizer.ggml.add_eos_token", &v.add_eos},
                           BoolKey{"tokenizer.ggml.add_space_prefix", &v.add_space_prefix}}) {
    bool b = false;
    if (!gguf.Has(k.key)) continue;
    KVTIER_RETURN_IF_ERROR(optional(gguf.GetBool(k.key), &b));
    *k.dst = b;
  }
  KVTIER_RETURN_IF_ERROR(optional(gguf.GetString("tokenizer.chat_template"), &v.chat_template));
  return FromVocab(std::move(v));
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool strip_leading_space)
    : tok_(tokenizer),
      strip_pending_(strip_leading_space && tokenizer.kind() == TokenizerKind::kSpm &&
                     tokenizer.add_space_prefix()) {}

std::string StreamDecoder::Push(int32_t id) {
  if (tok_.IsControl(id)) return {};
  std::string piece = tok_.TokenPiece(id);
  if (strip_pending_ && !piece.empty()) {
    if (piece[0] == ' ') piece.erase(0, 1);
    strip_pending_ = false;
  }
  pending_ += piece;
  const size_t hold = tokenizer_internal::IncompleteUtf8Tail(pending_);
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StreamDecoder::Flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace kvtier
