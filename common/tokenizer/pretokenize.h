// Pre-tokenizers of byte-level BPE vocabularies: the regex each model family
// splits text with before BPE, matched by hand (no regex engine) with exactly
// the regex semantics (leftmost alternative, greedy with backtracking), and
// text between matches kept as its own piece, as HF tokenizers' Split
// ("isolated") and llama.cpp's unicode_regex_split do.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "common/util/status.h"

namespace specd {

enum class PreTokenizerKind {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // Each \p{N} isolated first, then the GPT-2 pattern (SmolLM, StarCoder).
  kDigitsGpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // As kLlama3 with \p{N} (single digits) instead of \p{N}{1,3}.
  kQwen2,
};

// tokenizer.ggml.pre -> kind; an unknown name is an error listing the supported ones.
absl::StatusOr<PreTokenizerKind> ParsePreTokenizer(std::string_view name);
std::string SupportedPreTokenizers();

// Splits `text` into pieces (views into `text`) whose concatenation is `text`.
std::vector<std::string_view> PreTokenize(PreTokenizerKind kind, std::string_view text);

}  // namespace specd
