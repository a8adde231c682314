// Internal: what the "llama" (SentencePiece BPE) and "gpt2" (byte-level BPE)
// tokenizers share, and their factories. Not for use outside common/tokenizer.
#pragma once
#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/tokenizer/tokenizer.h"

namespace specd::tokenizer_internal {

class TokenizerImpl : public Tokenizer {
 protected:
  // A piece of input: raw text, or a special token matched in it (id >= 0).
  struct Fragment {
    std::string_view text;
    int32_t id = -1;
  };
  // Loads what every model shares (LoadCommon) and indexes special tokens.
  absl::Status Init(const GgufFile& f);
  // Splits at special tokens, leftmost first and longest at a position.
  std::vector<Fragment> Partition(std::string_view text, bool parse_special) const;
  // Tokens never produced by plain text: control/unknown (need parse_special)
  // and user-defined (always), bucketed by first byte, longest first.
  std::array<std::vector<int32_t>, 256> specials_by_byte_;
};

absl::StatusOr<std::unique_ptr<Tokenizer>> NewSpmTokenizer(const GgufFile& f);
absl::StatusOr<std::unique_ptr<Tokenizer>> NewBpeTokenizer(const GgufFile& f);

// Reads an integer array key of any integer element type; empty when absent.
absl::StatusOr<std::vector<int64_t>> ReadIntArray(const GgufFile& f, std::string_view key);
absl::StatusOr<std::vector<double>> ReadFloatArray(const GgufFile& f, std::string_view key);
absl::StatusOr<std::vector<std::string>> ReadStringArray(const GgufFile& f, std::string_view key);
absl::StatusOr<bool> ReadBoolOr(const GgufFile& f, std::string_view key, bool def);
std::string FileName(const GgufFile& f);

// GPT-2's byte <-> printable-unicode alphabet of byte-level BPE.
const std::array<std::string, 256>& ByteToUnicode();
// Maps a code point of that alphabet back to its byte, -1 if not in it.
int UnicodeToByte(uint32_t cp);

}  // namespace specd::tokenizer_internal
