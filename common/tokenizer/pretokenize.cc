#include "common/tokenizer/pretokenize.h"

#include <array>
#include <utility>

#include "common/tokenizer/unicode.h"

namespace specd {
namespace {

using unicode::CodepointSpan;

struct NamedKind {
  std::string_view name;
  PreTokenizerKind kind;
};
// llama.cpp pre-tokenizer names whose regexes are exactly one of ours.
constexpr std::array<NamedKind, 19> kNames = {{
    {"default", PreTokenizerKind::kGpt2},
    {"gpt2", PreTokenizerKind::kGpt2},
    {"gpt-2", PreTokenizerKind::kGpt2},
    {"mpt", PreTokenizerKind::kGpt2},
    {"olmo", PreTokenizerKind::kGpt2},
    {"jais", PreTokenizerKind::kGpt2},
    {"llama-bpe", PreTokenizerKind::kLlama3},
    {"llama3", PreTokenizerKind::kLlama3},
    {"dbrx", PreTokenizerKind::kLlama3},
    {"smaug-bpe", PreTokenizerKind::kLlama3},
    {"qwen2", PreTokenizerKind::kQwen2},
    {"stablelm2", PreTokenizerKind::kQwen2},
    {"smollm", PreTokenizerKind::kDigitsGpt2},
    {"starcoder", PreTokenizerKind::kDigitsGpt2},
    {"refact", PreTokenizerKind::kDigitsGpt2},
    {"command-r", PreTokenizerKind::kDigitsGpt2},
    {"codeshell", PreTokenizerKind::kDigitsGpt2},
    {"exaone", PreTokenizerKind::kDigitsGpt2},
    {"minerva-7b", PreTokenizerKind::kDigitsGpt2},
}};

// A fragment of code points; matchers see only [0, n) so lookahead at the
// fragment's end behaves as at the end of the text.
struct Frag {
  const CodepointSpan* c;
  size_t n;
  uint32_t at(size_t i) const { return c[i].cp; }
  bool L(size_t i) const { return i < n && unicode::IsLetter(c[i].cp); }
  bool N(size_t i) const { return i < n && unicode::IsNumber(c[i].cp); }
  bool S(size_t i) const { return i < n && unicode::IsWhitespace(c[i].cp); }
  bool CrLf(size_t i) const { return i < n && (c[i].cp == '\r' || c[i].cp == '\n'); }
  // [^\s\p{L}\p{N}]
  bool O(size_t i) const {
    if (i >= n) return false;
    const uint32_t cp = c[i].cp;
    return !unicode::IsWhitespace(cp) && !unicode::IsLetter(cp) && !unicode::IsNumber(cp);
  }
  bool Is(size_t i, uint32_t cp) const { return i < n && c[i].cp == cp; }
  template <typename P>
  size_t Run(size_t i, P pred) const {
    size_t j = i;
    while (j < n && pred(j)) ++j;
    return j - i;
  }
};

// 's|'t|'re|'ve|'m|'ll|'d, optionally case-insensitive (Unicode simple case
// folding, as Oniguruma applies it: 's' also matches U+017F LONG S).
size_t Contraction(const Frag& f, size_t i, bool icase) {
  if (!f.Is(i, '\'')) return 0;
  auto eq = [&](size_t k, char lower) {
    if (k >= f.n) return false;
    const uint32_t cp = f.at(k);
    if (cp == static_cast<uint32_t>(lower)) return true;
    if (!icase) return false;
    return cp == static_cast<uint32_t>(lower - 'a' + 'A') || (lower == 's' && cp == 0x017F);
  };
  if (eq(i + 1, 's') || eq(i + 1, 't')) return 2;
  if (eq(i + 1, 'r') && eq(i + 2, 'e')) return 3;
  if (eq(i + 1, 'v') && eq(i + 2, 'e')) return 3;
  if (eq(i + 1, 'm')) return 2;
  if (eq(i + 1, 'l') && eq(i + 2, 'l')) return 3;
  if (eq(i + 1, 'd')) return 2;
  return 0;
}

// \s+(?!\S): the whitespace run, less its last char when \S follows.
size_t SpaceNotBeforeNonSpace(const Frag& f, size_t i) {
  const size_t r = f.Run(i, [&](size_t k) { return f.S(k); });
  if (r == 0) return 0;
  if (i + r == f.n) return r;
  return r - 1;  // 0 when r == 1: no match
}

size_t MatchGpt2(const Frag& f, size_t i) {
  if (size_t m = Contraction(f, i, /*icase=*/false)) return m;
  const bool sp = f.Is(i, ' ');
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
  if (sp && f.L(i + 1)) return 1 + f.Run(i + 1, [&](size_t k) { return f.L(k); });
  if (f.L(i)) return f.Run(i, [&](size_t k) { return f.L(k); });
  if (sp && f.N(i + 1)) return 1 + f.Run(i + 1, [&](size_t k) { return f.N(k); });
  if (f.N(i)) return f.Run(i, [&](size_t k) { return f.N(k); });
  if (sp && f.O(i + 1)) return 1 + f.Run(i + 1, [&](size_t k) { return f.O(k); });
  if (f.O(i)) return f.Run(i, [&](size_t k) { return f.O(k); });
  if (size_t m = SpaceNotBeforeNonSpace(f, i)) return m;
  return f.Run(i, [&](size_t k) { return f.S(k); });  // \s+
}

size_t MatchLlama3(const Frag& f, size_t i, size_t max_digits) {
  if (size_t m = Contraction(f, i, /*icase=*/true)) return m;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (f.L(i)) return f.Run(i, [&](size_t k) { return f.L(k); });
  if (i < f.n && !f.CrLf(i) && !f.N(i) && f.L(i + 1)) {
    return 1 + f.Run(i + 1, [&](size_t k) { return f.L(k); });
  }
  // \p{N}{1,max}
  if (f.N(i)) {
    size_t r = f.Run(i, [&](size_t k) { return f.N(k); });
    return r < max_digits ? r : max_digits;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  size_t o = 0;
  if (f.Is(i, ' ') && f.O(i + 1)) {
    o = 1 + f.Run(i + 1, [&](size_t k) { return f.O(k); });
  } else if (f.O(i)) {
    o = f.Run(i, [&](size_t k) { return f.O(k); });
  }
  if (o > 0) return o + f.Run(i + o, [&](size_t k) { return f.CrLf(k); });
  // \s*[\r\n]+ : up to and including the last CR/LF of the whitespace run.
  const size_t r = f.Run(i, [&](size_t k) { return f.S(k); });
  for (size_t k = r; k > 0; --k) {
    if (f.CrLf(i + k - 1)) return k;
  }
  if (size_t m = SpaceNotBeforeNonSpace(f, i)) return m;
  return r;  // \s+
}

template <typename M>
void SplitFragment(const Frag& f, std::string_view text, M match, std::vector<std::string_view>& out) {
  auto emit = [&](size_t a, size_t b) {  // code point range [a, b)
    if (a < b) {
      const size_t off = f.c[a].offset;
      out.push_back(text.substr(off, f.c[b - 1].offset + f.c[b - 1].len - off));
    }
  };
  size_t unmatched = 0, i = 0;
  while (i < f.n) {
    const size_t m = match(f, i);
    if (m == 0) {
      ++i;
      continue;
    }
    emit(unmatched, i);
    emit(i, i + m);
    i += m;
    unmatched = i;
  }
  emit(unmatched, f.n);
}

}  // namespace

std::string SupportedPreTokenizers() {
  std::string s;
  for (const auto& n : kNames) {
    if (!s.empty()) s += ", ";
    s += n.name;
  }
  return s;
}

absl::StatusOr<PreTokenizerKind> ParsePreTokenizer(std::string_view name) {
  for (const auto& n : kNames) {
    if (n.name == name) return n.kind;
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported pre-tokenizer '", std::string(name),
                                                 "' (supported: ", SupportedPreTokenizers(), ")"));
}

std::vector<std::string_view> PreTokenize(PreTokenizerKind kind, std::string_view text) {
  std::vector<std::string_view> out;
  const std::vector<CodepointSpan> cps = unicode::Decode(text);
  const Frag all{cps.data(), cps.size()};
  switch (kind) {
    case PreTokenizerKind::kGpt2:
      SplitFragment(all, text, MatchGpt2, out);
      break;
    case PreTokenizerKind::kLlama3:
      SplitFragment(all, text, [](const Frag& f, size_t i) { return MatchLlama3(f, i, 3); }, out);
      break;
    case PreTokenizerKind::kQwen2:
      SplitFragment(all, text, [](const Frag& f, size_t i) { return MatchLlama3(f, i, 1); }, out);
      break;
    case PreTokenizerKind::kDigitsGpt2: {
      // Isolate every \p{N}; the GPT-2 pattern then runs on each fragment alone.
      size_t start = 0;
      for (size_t i = 0; i <= cps.size(); ++i) {
        if (i < cps.size() && !unicode::IsNumber(cps[i].cp)) continue;
        if (i > start) SplitFragment(Frag{cps.data() + start, i - start}, text, MatchGpt2, out);
        if (i < cps.size()) SplitFragment(Frag{cps.data() + i, 1}, text, MatchGpt2, out);
        start = i + 1;
      }
      break;
    }
  }
  return out;
}

}  // namespace specd
