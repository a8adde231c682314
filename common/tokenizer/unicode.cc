#include "common/tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace specd::unicode {
namespace {

struct CategoryRun {
  uint32_t first;
  Category cat;
};
struct CodepointRange {
  uint32_t lo, hi;
};

#include "common/tokenizer/unicode_data.inc"

Category LookupCategory(uint32_t cp) {
  // Last run whose first code point is <= cp.
  const auto* end = kCategoryRuns + sizeof(kCategoryRuns) / sizeof(kCategoryRuns[0]);
  const auto* it = std::upper_bound(kCategoryRuns, end, cp,
                                    [](uint32_t v, const CategoryRun& r) { return v < r.first; });
  return (it - 1)->cat;
}

}  // namespace

Category GetCategory(uint32_t cp) {
  // Latin-1 is most of what we see: a direct table instead of a search.
  static const std::array<Category, 256> kLatin1 = [] {
    std::array<Category, 256> t{};
    for (uint32_t c = 0; c < 256; ++c) t[c] = LookupCategory(c);
    return t;
  }();
  if (cp < 256) return kLatin1[cp];
  if (cp > 0x10FFFF) return kOther;
  return LookupCategory(cp);
}

bool IsWhitespace(uint32_t cp) {
  if (cp < 0x80) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  for (const auto& r : kWhiteSpace) {
    if (cp >= r.lo && cp <= r.hi) return true;
  }
  return false;
}

int Utf8SeqLen(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

uint32_t DecodeOne(std::string_view s, size_t& i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int n = Utf8SeqLen(b0);
  if (n == 1 || i + n > s.size()) {
    ++i;
    return 0xFFFD;
  }
  uint32_t cp = b0 & (0xFF >> (n + 1));
  for (int k = 1; k < n; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return 0xFFFD;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  // Overlong forms, surrogates and out-of-range values are invalid too.
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++i;
    return 0xFFFD;
  }
  i += n;
  return cp;
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::vector<CodepointSpan> Decode(std::string_view s) {
  std::vector<CodepointSpan> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t start = i;
    uint32_t cp = DecodeOne(s, i);
    out.push_back({cp, static_cast<uint32_t>(start), static_cast<uint32_t>(i - start)});
  }
  return out;
}

std::vector<std::string_view> SplitChars(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t start = i;
    DecodeOne(s, i);
    out.push_back(s.substr(start, i - start));
  }
  return out;
}

}  // namespace specd::unicode
