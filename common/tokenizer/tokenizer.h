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
#include <memory>
#include <string>
#include <string_view>
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
  bool add_bos() const { return add_bos_; }
  // End of generation: eos, eot (<|eot_id|>, <|im_end|>, <|endoftext|>), eom.
  bool IsEog(int32_t id) const;
  const std::vector<int32_t>& eog_ids() const { return eog_; }

  // Text -> ids. add_bos prepends bos when the vocab has one and add_bos() says so.
  virtual std::vector<int32_t> Encode(std::string_view text, bool add_special, bool parse_special) const = 0;
  // The raw bytes a token stands for (byte tokens decoded, '▁' -> ' ', byte-level
  // BPE unicode mapped back to bytes). Control tokens give "" unless `special`.
  virtual std::string TokenBytes(int32_t id, bool special = false) const = 0;
  std::string Decode(const std::vector<int32_t>& ids, bool special = false) const;

  const std::string& TokenText(int32_t id) const { return tokens_.at(id); }
  TokenType Type(int32_t id) const { return types_.empty() ? TokenType::kNormal : types_.at(id); }
  // SHA-256 hex of the vocabulary (token texts and types): equal digests mean
  // two models can share token ids (draft/target compatibility).
  std::string VocabDigest() const;

  // Chat prompt from messages with the template the GGUF declares
  // (tokenizer.chat_template): ChatML (Qwen, SmolLM) or Llama 3 recognised by
  // their markers; add_generation_prompt opens the assistant turn.
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
};

// Streams decoded text: holds back bytes of an incomplete UTF-8 character so a
// stream never emits half a character; Flush() returns what is left at the end.
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
