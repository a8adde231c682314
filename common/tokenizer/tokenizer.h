// Tokenizers built from GGUF metadata (tokenizer.ggml.*):
//   - "llama": SentencePiece BPE with scores, byte fallback (<0xNN> tokens) and
//     the '▁' whitespace convention (add_space_prefix honoured).
//   - "gpt2": byte-level BPE with merges and the pre-tokenizer of the model
//     family (tokenizer.ggml.pre: "llama-bpe"/"llama3" and "qwen2" regexes,
//     "default"/"gpt2" for GPT-2's pattern, "smollm" and similar aliases).
// Special/control tokens written in text ("<|im_start|>") are matched as single
// tokens when parse_special is set.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/gguf/gguf.h"
#include "common/util/status.h"

namespace specd {

enum class TokenType : int32_t {
  kUndefined = 0, kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6,
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufFile& f);

  virtual std::string_view model() const = 0;  // "llama" or "gpt2"
  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t bos() const { return bos_; }  // -1 if none
  int32_t eos() const { return eos_; }
  int32_t pad() const { return pad_; }
  int32_t unk() const { return unk_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // End of generation: eos, eot (<|eot_id|>, <|im_end|>, <|endoftext|>), eom.
  bool IsEog(int32_t id) const;
  const std::vector<int32_t>& eog_ids() const { return eog_; }

  // Text -> ids. add_special prepends bos when the vocab has one and add_bos()
  // says so (and appends eos when add_eos() says so). parse_special matches
  // control/unknown tokens written in the text ("<|im_start|>") as single
  // tokens, longest first; user-defined tokens are always matched (as
  // SentencePiece, HF tokenizers and llama.cpp do). Text between them is
  // tokenized normally; a "llama" vocab adds its '▁' prefix at the start and
  // after each special token (llama.cpp semantics).
  virtual std::vector<int32_t> Encode(std::string_view text, bool add_special, bool parse_special) const = 0;
  // The raw bytes a token stands for (byte tokens decoded, '▁' -> ' ', byte-level
  // BPE unicode mapped back to bytes). Control tokens give "" unless `special`.
  virtual std::string TokenBytes(int32_t id, bool special = false) const = 0;
  // Concatenated TokenBytes; note a "llama" vocab keeps the ' ' of its '▁'
  // prefix (Decode(Encode("hi")) == " hi"), which is right for streaming
  // generated text; may be invalid UTF-8 when cut mid-character.
  std::string Decode(const std::vector<int32_t>& ids, bool special = false) const;

  // Out-of-range ids give "" and kUndefined (never throw).
  const std::string& TokenText(int32_t id) const {
    static const std::string kNone;
    return id >= 0 && id < vocab_size() ? tokens_[id] : kNone;
  }
  // Id of the token whose text is exactly `text` (the last one if repeated), -1 if none.
  int32_t FindToken(std::string_view text) const;
  TokenType Type(int32_t id) const {
    if (id < 0 || id >= vocab_size()) return TokenType::kUndefined;
    return types_.empty() ? TokenType::kNormal : types_[id];
  }
  // SHA-256 hex of the vocabulary (token texts and types): equal digests mean
  // two models can share token ids (draft/target compatibility).
  std::string VocabDigest() const;

  // Chat prompt from messages with the template the GGUF declares
  // (tokenizer.chat_template): ChatML (Qwen, SmolLM) or Llama 3 recognised by
  // their markers; add_generation_prompt opens the assistant turn. A ChatML
  // template's literal default system prompt (SmolLM2, Qwen2.5) is used when
  // the first message is not a system one; Llama 3's "| trim" of contents is
  // honoured. Anything else is an error, never a guess. Tokenize the result
  // with parse_special and without add_special (it carries its own bos).
  absl::StatusOr<std::string> ApplyChatTemplate(const std::vector<ChatMessage>& msgs,
                                                bool add_generation_prompt) const;
  const std::string& chat_template() const { return chat_template_; }

 protected:
  absl::Status LoadCommon(const GgufFile& f);
  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  std::vector<float> scores_;
  int32_t bos_ = -1, eos_ = -1, pad_ = -1, unk_ = -1;
  bool add_bos_ = false, add_eos_ = false;
  std::vector<int32_t> eog_;
  std::string chat_template_;

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> token_to_id_;
};

// Streams decoded text: holds back bytes of an incomplete UTF-8 character so a
// stream never emits half a character; Flush() returns what is left at the end.
// Output is always valid UTF-8: bytes that cannot start or continue a
// character come out as U+FFFD (at once, or at Flush() for a truncated tail).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer* tok) : tok_(tok) {}
  std::string Push(int32_t id);
  std::string Flush();

 private:
  const Tokenizer* tok_;
  std::string pending_;
};

}  // namespace specd
