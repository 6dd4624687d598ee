// Internals shared by the tokenizer's files: the validated vocabulary (Tokenizer::Impl), the SPM
// and BPE segmenters, the byte-level mapping and the PCRE2 pre-tokenizer.
//
// Ownership: Impl owns everything; PreTokenizer owns its compiled PCRE2 patterns.
// Thread safety: immutable after construction; PreTokenizer::Split allocates its match data per
// call, so concurrent calls are safe.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvtier/status.h"
#include "kvtier/tokenizer.h"

namespace kvtier::tokenizer_internal {

// Transparent hashing so string_view lookups do not allocate.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Length in bytes of the UTF-8 character starting at s[i] when it is well formed (1..4), else 1
// (a stray or truncated byte stands alone).
size_t Utf8CharLen(std::string_view s, size_t i);
// How many bytes at the end of `s` are the start of a character that is not complete yet
// (0 when `s` ends on a character boundary or with bytes that can never become valid).
size_t IncompleteUtf8Tail(std::string_view s);
void AppendUtf8(std::string* out, uint32_t cp);

// GPT-2's reversible byte <-> printable code point mapping.
const std::array<uint32_t, 256>& ByteToCodepoint();
// -1 for a code point that no byte maps to.
int CodepointToByte(uint32_t cp);
std::string ByteLevelEncode(std::string_view bytes);

// Splits text into pre-tokenizer words with a sequence of regexes: each regex splits every
// current piece into its matches and the gaps between them (gaps are kept as pieces).
class PreTokenizer {
 public:
  // Unknown `pre` -> InvalidArgument naming tokenizer.ggml.pre.
  static Result<std::unique_ptr<PreTokenizer>> Create(std::string_view pre);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;
  std::vector<std::string_view> Split(std::string_view text) const;
  bool ignore_merges() const { return ignore_merges_; }
  bool add_bos() const { return add_bos_; }

 private:
  PreTokenizer() = default;
  std::vector<void*> codes_;  // pcre2_code_8*
  bool ignore_merges_ = false;
  bool add_bos_ = false;
};
// The names Create accepts, comma-separated (for messages and docs).
std::string SupportedPreTokenizers();

}  // namespace kvtier::tokenizer_internal

namespace kvtier {

struct Tokenizer::Impl {
  TokenizerKind kind = TokenizerKind::kSpm;
  std::string pre;
  std::vector<std::string> text;     // by id
  std::vector<float> score;          // by id
  std::vector<TokenType> type;       // by id (after EOG fix-ups)
  std::vector<std::string> piece;    // TokenPiece by id, precomputed
  tokenizer_internal::TokenMap to_id;
  // BPE: "left\x1fright" -> rank. (0x1f never occurs inside byte-level mapped tokens.)
  tokenizer_internal::TokenMap merge_rank;
  std::array<int32_t, 256> byte_token{};  // SPM <0xNN> / BPE single-byte token, -1 when absent
  std::vector<int32_t> special;           // control/user-defined/unknown ids, longest text first
  std::vector<bool> eog;                  // by id
  std::unique_ptr<tokenizer_internal::PreTokenizer> pretok;  // BPE only
  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, pad = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = false;
  bool ignore_merges = false;
  std::string chat_template;
  std::vector<std::string> warnings;

  // Segmenters for one run of ordinary text (no special tokens inside); append to `out`.
  void EncodeSpm(std::string_view text, std::vector<int32_t>* out) const;
  void EncodeBpe(std::string_view text, std::vector<int32_t>* out) const;
  void EmitBytes(std::string_view bytes, std::vector<int32_t>* out) const;
};

}  // namespace kvtier
