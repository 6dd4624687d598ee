// Module tokenizer (src/tokenizer, kvtier_tokenizer; order and include rule: docs/architecture.md)
// owns tokenizers from GGUF metadata, stream decoding, chat templates.
//
// Tokenizers built from GGUF metadata (tokenizer.ggml.*): SentencePiece-style ("llama": scores,
// byte fallback <0xNN>, leading-space prefix) and byte-level BPE ("gpt2": merge ranks, the GPT-2
// bytes-to-unicode mapping, pre-tokenizer regexes run by PCRE2). Encoding matches llama.cpp's
// tokenizer on its conformance vectors; special/control and user-defined tokens are matched in
// the text before pre-tokenization (longest token first). Letter/number classes come from
// PCRE2's Unicode tables (Unicode 14 in PCRE2 10.42); llama.cpp's are newer, so a code point
// assigned since (e.g. U+1E061) may split differently before a contraction or a letter run.
//
// Ownership: a Tokenizer owns its vocabulary (copied out of the GgufFile, which may be closed
// afterwards). A StreamDecoder holds a reference to its Tokenizer, which must outlive it.
// Thread safety: a Tokenizer is immutable after construction; any number of threads may call its
// const methods. A StreamDecoder is thread-compatible (one thread at a time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

class GgufFile;

enum class TokenizerKind : uint8_t {
  kSpm = 0,  // tokenizer.ggml.model "llama"
  kBpe = 1,  // tokenizer.ggml.model "gpt2" (byte-level BPE)
};
std::string_view TokenizerKindName(TokenizerKind k);  // "spm" / "bpe"

// tokenizer.ggml.token_type values (as stored in GGUF files: never change).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// The tokenizer metadata of a GGUF file, as plain values: what FromGguf reads, and what tests or
// other loaders may fill in by hand. Field comments name the GGUF key.
struct TokenizerVocab {
  std::string model;                 // tokenizer.ggml.model: "llama" or "gpt2"
  std::string pre;                   // tokenizer.ggml.pre (BPE only; empty: "default")
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens
  std::vector<float> scores;         // tokenizer.ggml.scores (empty: all 0)
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type (empty: all normal)
  std::vector<std::string> merges;   // tokenizer.ggml.merges ("left right", BPE only)
  std::optional<int64_t> bos_id;     // tokenizer.ggml.bos_token_id
  std::optional<int64_t> eos_id;     // tokenizer.ggml.eos_token_id
  std::optional<int64_t> eot_id;     // tokenizer.ggml.eot_token_id
  std::optional<int64_t> eom_id;     // tokenizer.ggml.eom_token_id
  std::optional<int64_t> unk_id;     // tokenizer.ggml.unknown_token_id
  std::optional<int64_t> pad_id;     // tokenizer.ggml.padding_token_id
  std::optional<bool> add_bos;       // tokenizer.ggml.add_bos_token
  std::optional<bool> add_eos;       // tokenizer.ggml.add_eos_token
  std::optional<bool> add_space_prefix;  // tokenizer.ggml.add_space_prefix (SPM default: true)
  std::string chat_template;         // tokenizer.chat_template (Jinja source, may be empty)
};

class Tokenizer {
 public:
  // Reads tokenizer.ggml.* from `gguf`. Errors (InvalidArgument) name the offending key: a
  // missing or mistyped key, arrays of mismatched lengths, merges naming unknown tokens, special
  // token ids out of range, an unknown model or pre-tokenizer.
  static Result<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& gguf);
  // Same validation on metadata given by value.
  static Result<std::unique_ptr<Tokenizer>> FromVocab(TokenizerVocab vocab);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Token ids of `text`, with the BOS token first when `add_bos` (and the vocabulary has one).
  // With `parse_special`, control tokens written in the text ("<|im_start|>") become their ids;
  // user-defined tokens are always matched. Never fails: bytes with no token map to byte tokens,
  // or to the unknown token.
  std::vector<int32_t> Encode(std::string_view text, bool add_bos, bool parse_special = true) const;

  // The bytes token `id` stands for: SPM '▁' -> ' ' and <0xNN> -> that byte; BPE with the
  // byte-level mapping undone; control, unknown and user-defined tokens: their text. Empty for an
  // id out of range.
  std::string TokenPiece(int32_t id) const;
  // Concatenated pieces. Control and unknown tokens give nothing unless `render_special`. For an
  // SPM vocabulary that adds a space prefix, the one space Encode put in front of the text is
  // removed from the first token (after a leading BOS), so Decode(Encode(x)) == x.
  std::string Decode(std::span<const int32_t> ids, bool render_special = false) const;

  TokenizerKind kind() const;
  const std::string& pre() const;  // pre-tokenizer name ("default", "gpt-2", "llama-bpe", ...)
  size_t vocab_size() const;
  int32_t bos_id() const;  // -1 when none
  int32_t eos_id() const;  // -1 when none
  int32_t eot_id() const;  // -1 when none
  int32_t unk_id() const;  // -1 when none
  bool add_bos_default() const;
  bool add_space_prefix() const;
  // eos, eot, eom and tokens named <|im_end|>, <|eot_id|>, <|endoftext|>, <end_of_turn>, ...
  bool IsEndOfGeneration(int32_t id) const;
  bool IsControl(int32_t id) const;  // control or unknown: rendered only on request
  const std::string& TokenText(int32_t id) const;  // the vocabulary entry as stored
  // -1 when `text` is not a token.
  int32_t FindToken(std::string_view text) const;
  const std::string& chat_template() const;  // tokenizer.chat_template, may be empty
  // Things that were accepted but are suspicious (an out-of-range padding id, ...).
  const std::vector<std::string>& warnings() const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Turns generated token ids into text as they arrive: never emits a partial UTF-8 character (the
// bytes of one may come from several byte tokens); control tokens give nothing. Like llama.cpp's
// generation loop it keeps the leading space of the first token (the text continues a prompt)
// unless `strip_leading_space` is set for an SPM tokenizer that adds a space prefix.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool strip_leading_space = false);
  // Text that is complete after `id`; may be empty.
  std::string Push(int32_t id);
  // Whatever is held back (an incomplete UTF-8 sequence at the end, passed through as bytes).
  std::string Flush();

 private:
  const Tokenizer& tok_;
  bool strip_pending_;
  std::string pending_;
};

}  // namespace kvtier
