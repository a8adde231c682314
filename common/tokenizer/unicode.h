// UTF-8 and the few Unicode properties the pre-tokenizers need (major general
// category, White_Space), from the table in unicode_data.inc.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace specd::unicode {

enum Category : uint8_t { kOther, kLetter, kNumber, kPunct, kSymbol, kMark, kSeparator };

Category GetCategory(uint32_t cp);
bool IsWhitespace(uint32_t cp);  // Unicode White_Space (what \s matches)
inline bool IsLetter(uint32_t cp) { return GetCategory(cp) == kLetter; }
inline bool IsNumber(uint32_t cp) { return GetCategory(cp) == kNumber; }

// Length of the UTF-8 sequence a lead byte announces (1 for invalid leads, so a
// stray byte is one "character" and nothing is ever skipped).
int Utf8SeqLen(uint8_t lead);

// Decodes one code point at s[i]; advances i by the bytes consumed (>= 1).
// Invalid or truncated sequences decode as U+FFFD consuming one byte.
uint32_t DecodeOne(std::string_view s, size_t& i);
void AppendUtf8(uint32_t cp, std::string& out);

// Splits into code points, keeping each one's byte span so pieces can be cut
// from the original bytes (invalid bytes stay as they were).
struct CodepointSpan {
  uint32_t cp;
  uint32_t offset;
  uint32_t len;
};
std::vector<CodepointSpan> Decode(std::string_view s);

// Splits into UTF-8 "characters" for symbol-level BPE: a complete valid
// sequence, or a single byte when invalid/truncated.
std::vector<std::string_view> SplitChars(std::string_view s);

}  // namespace specd::unicode
