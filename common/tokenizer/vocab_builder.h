// Real, deterministic vocabularies without downloads, for generated test
// models: BPE trained on a small embedded English/code corpus.
//   - BuildByteLevelBpeVocab: a "gpt2" byte-level BPE vocab: <|endoftext|>,
//     <|im_start|>, <|im_end|> (control), the 256 byte tokens, then one token
//     per learned merge, and a ChatML chat template.
//   - BuildSpmVocab: a "llama" SentencePiece-style vocab: <unk>, <s>, </s>,
//     <0x00>..<0xFF> byte tokens, merged pieces (score -rank), then the
//     corpus characters (lowest scores), as sentencepiece lays a BPE model out.
// When the corpus runs out of merges before `vocab_size`, the rest is filled
// with control tokens "<|reserved_special_token_N|>" (as Llama 3 does), so the
// size is always exactly what was asked.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/gguf/gguf.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/status.h"

namespace specd {

struct BuiltVocab {
  std::string model;  // "gpt2" or "llama"
  std::string pre;    // tokenizer.ggml.pre (gpt2)
  std::vector<std::string> tokens;
  std::vector<TokenType> types;
  std::vector<float> scores;        // llama (empty for gpt2)
  std::vector<std::string> merges;  // gpt2: "left right", rank order
  int32_t bos = -1, eos = -1, pad = -1, unk = -1;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
  std::string chat_template;

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  // Sets every tokenizer.ggml.* key (and tokenizer.chat_template if any).
  void WriteToGguf(GgufWriter& w) const;
};

// The ChatML template written by BuildByteLevelBpeVocab (Jinja, as HF ships it).
std::string_view ChatMlTemplate();
// The embedded training text.
std::string_view VocabCorpus();

// vocab_size >= 259. `pre` is any name ParsePreTokenizer accepts; training
// splits the corpus with it, so encoding matches the training segmentation.
absl::StatusOr<BuiltVocab> BuildByteLevelBpeVocab(int32_t vocab_size, std::string_view pre = "smollm");
// vocab_size >= 259 + the number of distinct corpus characters (about 90).
absl::StatusOr<BuiltVocab> BuildSpmVocab(int32_t vocab_size);

}  // namespace specd
