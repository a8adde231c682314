#include "common/tokenizer/vocab_builder.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <unordered_map>
#include <utility>

#include "common/tokenizer/pretokenize.h"
#include "common/tokenizer/tokenizer_impl.h"
#include "common/tokenizer/unicode.h"

namespace specd {
namespace {

#include "common/tokenizer/corpus.inc"

constexpr std::string_view kChatMl =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

// Plain BPE training over words (each a sequence of symbol ids with a count).
// Picks the most frequent adjacent pair, ties by the smaller (left, right)
// strings, so the result is fully deterministic.
class BpeTrainer {
 public:
  // Registers a symbol; returns its id.
  int32_t Symbol(const std::string& s) {
    auto [it, inserted] = id_.emplace(s, static_cast<int32_t>(text_.size()));
    if (inserted) text_.push_back(s);
    return it->second;
  }
  void AddWord(std::vector<int32_t> syms, int64_t count) { words_.push_back({std::move(syms), count}); }
  const std::string& Text(int32_t id) const { return text_[id]; }

  // The next merge with count >= min_count; false if none.
  bool Next(int64_t min_count, int32_t& left, int32_t& right) {
    std::unordered_map<uint64_t, int64_t> counts;
    for (const auto& w : words_) {
      for (size_t i = 1; i < w.syms.size(); ++i) counts[Key(w.syms[i - 1], w.syms[i])] += w.count;
    }
    bool found = false;
    int64_t best = 0;
    for (const auto& [k, c] : counts) {
      if (c < min_count) continue;
      const auto l = static_cast<int32_t>(k >> 32), r = static_cast<int32_t>(k & 0xFFFFFFFF);
      if (!found || c > best ||
          (c == best && std::tie(text_[l], text_[r]) < std::tie(text_[left], text_[right]))) {
        found = true;
        best = c;
        left = l;
        right = r;
      }
    }
    return found;
  }

  // Applies a merge everywhere; returns the merged symbol's id.
  int32_t Merge(int32_t left, int32_t right) {
    const int32_t merged = Symbol(text_[left] + text_[right]);
    for (auto& w : words_) {
      std::vector<int32_t> out;
      out.reserve(w.syms.size());
      for (size_t i = 0; i < w.syms.size(); ++i) {
        if (i + 1 < w.syms.size() && w.syms[i] == left && w.syms[i + 1] == right) {
          out.push_back(merged);
          ++i;
        } else {
          out.push_back(w.syms[i]);
        }
      }
      w.syms = std::move(out);
    }
    return merged;
  }

 private:
  static uint64_t Key(int32_t l, int32_t r) { return (uint64_t(uint32_t(l)) << 32) | uint32_t(r); }
  struct Word {
    std::vector<int32_t> syms;
    int64_t count;
  };
  std::vector<Word> words_;
  std::vector<std::string> text_;
  std::unordered_map<std::string, int32_t> id_;
};

void PadReserved(BuiltVocab& v, int32_t vocab_size) {
  for (int32_t k = 0; v.size() < vocab_size; ++k) {
    v.tokens.push_back(absl::StrCat("<|reserved_special_token_", k, "|>"));
    v.types.push_back(TokenType::kControl);
    if (!v.scores.empty() || v.model == "llama") v.scores.push_back(0.0f);
  }
}

}  // namespace

std::string_view ChatMlTemplate() { return kChatMl; }
std::string_view VocabCorpus() { return std::string_view(kCorpus, sizeof(kCorpus) - 1); }

void BuiltVocab::WriteToGguf(GgufWriter& w) const {
  w.Set("tokenizer.ggml.model", GgufValue::Str(model));
  if (!pre.empty()) w.Set("tokenizer.ggml.pre", GgufValue::Str(pre));
  w.Set("tokenizer.ggml.tokens", GgufValue::StrArray(tokens));
  std::vector<int32_t> t(types.size());
  std::transform(types.begin(), types.end(), t.begin(), [](TokenType x) { return static_cast<int32_t>(x); });
  w.Set("tokenizer.ggml.token_type", GgufValue::I32Array(std::move(t)));
  if (!scores.empty()) w.Set("tokenizer.ggml.scores", GgufValue::F32Array(scores));
  if (model == "gpt2") w.Set("tokenizer.ggml.merges", GgufValue::StrArray(merges));
  if (bos >= 0) w.Set("tokenizer.ggml.bos_token_id", GgufValue::U32(static_cast<uint32_t>(bos)));
  if (eos >= 0) w.Set("tokenizer.ggml.eos_token_id", GgufValue::U32(static_cast<uint32_t>(eos)));
  if (unk >= 0) w.Set("tokenizer.ggml.unknown_token_id", GgufValue::U32(static_cast<uint32_t>(unk)));
  if (pad >= 0) w.Set("tokenizer.ggml.padding_token_id", GgufValue::U32(static_cast<uint32_t>(pad)));
  w.Set("tokenizer.ggml.add_bos_token", GgufValue::Bool(add_bos));
  w.Set("tokenizer.ggml.add_eos_token", GgufValue::Bool(add_eos));
  if (model == "llama") w.Set("tokenizer.ggml.add_space_prefix", GgufValue::Bool(add_space_prefix));
  if (!chat_template.empty()) w.Set("tokenizer.chat_template", GgufValue::Str(chat_template));
}

absl::StatusOr<BuiltVocab> BuildByteLevelBpeVocab(int32_t vocab_size, std::string_view pre) {
  if (vocab_size < 259) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte-level BPE vocab_size ", vocab_size, " < 259 (3 special + 256 byte tokens)"));
  }
  SPECD_ASSIGN_OR_RETURN(PreTokenizerKind kind, ParsePreTokenizer(pre));
  BuiltVocab v;
  v.model = "gpt2";
  v.pre = std::string(pre);
  for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    v.tokens.push_back(s);
    v.types.push_back(TokenType::kControl);
  }
  v.bos = 0;  // Qwen2's layout: bos = pad = <|endoftext|>, eos = <|im_end|>
  v.pad = 0;
  v.eos = 2;
  v.chat_template = std::string(kChatMl);

  BpeTrainer tr;
  const auto& b2u = tokenizer_internal::ByteToUnicode();
  for (int b = 0; b < 256; ++b) {
    tr.Symbol(b2u[b]);  // symbol id == byte
    v.tokens.push_back(b2u[b]);
    v.types.push_back(TokenType::kNormal);
  }
  std::map<std::string, int64_t> words;  // ordered: deterministic symbol ids
  for (std::string_view piece : PreTokenize(kind, VocabCorpus())) {
    std::string w;
    for (char c : piece) w += b2u[static_cast<uint8_t>(c)];
    ++words[w];
  }
  for (const auto& [w, count] : words) {
    std::vector<int32_t> syms;
    for (std::string_view c : unicode::SplitChars(w)) {
      size_t i = 0;
      syms.push_back(tokenizer_internal::UnicodeToByte(unicode::DecodeOne(c, i)));
    }
    tr.AddWord(std::move(syms), count);
  }
  std::unordered_map<std::string, int32_t> have;
  for (int32_t i = 0; i < v.size(); ++i) have[v.tokens[i]] = i;
  // Frequent pairs first; single occurrences only once those run out.
  for (int64_t min_count : {2, 1}) {
    int32_t l = 0, r = 0;
    while (v.size() < vocab_size && tr.Next(min_count, l, r)) {
      v.merges.push_back(tr.Text(l) + " " + tr.Text(r));
      const std::string& merged = tr.Text(tr.Merge(l, r));
      if (have.emplace(merged, v.size()).second) {
        v.tokens.push_back(merged);
        v.types.push_back(TokenType::kNormal);
      }
    }
  }
  PadReserved(v, vocab_size);
  return v;
}

absl::StatusOr<BuiltVocab> BuildSpmVocab(int32_t vocab_size) {
  constexpr std::string_view kSpace = "\xE2\x96\x81";  // '▁'
  BuiltVocab v;
  v.model = "llama";
  v.add_bos = true;
  v.add_space_prefix = true;
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl};
  v.scores = {0.0f, 0.0f, 0.0f};
  v.unk = 0;
  v.bos = 1;
  v.eos = 2;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    v.tokens.push_back(name);
    v.types.push_back(TokenType::kByte);
    v.scores.push_back(0.0f);
  }

  // Words as sentencepiece sees them: each line gets the dummy prefix, spaces
  // become '▁', and every '▁' starts a new word.
  std::map<std::string, int64_t> words;
  std::map<std::string, int64_t> char_freq;
  std::string_view corpus = VocabCorpus();
  while (!corpus.empty()) {
    const size_t nl = corpus.find('\n');
    std::string_view line = corpus.substr(0, nl);
    corpus = nl == std::string_view::npos ? std::string_view() : corpus.substr(nl + 1);
    if (line.empty()) continue;
    std::string word;
    auto flush = [&] {
      if (!word.empty()) ++words[word];
      word.clear();
    };
    const std::string prefixed = " " + std::string(line);  // outlives the views below
    for (std::string_view c : unicode::SplitChars(prefixed)) {
      const bool space = c == " ";
      if (space) flush();
      word.append(space ? kSpace : c);
      ++char_freq[std::string(space ? kSpace : c)];
    }
    flush();
  }
  // Characters, most frequent first.
  std::vector<std::pair<std::string, int64_t>> chars(char_freq.begin(), char_freq.end());
  std::stable_sort(chars.begin(), chars.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  const int32_t min_size = 259 + static_cast<int32_t>(chars.size());
  if (vocab_size < min_size) {
    return absl::InvalidArgumentError(absl::StrCat("SentencePiece vocab_size ", vocab_size, " < ", min_size,
                                                   " (3 special + 256 byte + ", chars.size(), " character pieces)"));
  }

  BpeTrainer tr;
  for (const auto& [c, f] : chars) tr.Symbol(c);
  for (const auto& [w, count] : words) {
    std::vector<int32_t> syms;
    for (std::string_view c : unicode::SplitChars(w)) syms.push_back(tr.Symbol(std::string(c)));
    tr.AddWord(std::move(syms), count);
  }
  std::vector<std::string> pieces;
  std::unordered_map<std::string, int32_t> have;
  for (const auto& [c, f] : chars) have[c] = 0;
  const size_t n_merges = static_cast<size_t>(vocab_size - min_size);
  for (int64_t min_count : {2, 1}) {
    int32_t l = 0, r = 0;
    while (pieces.size() < n_merges && tr.Next(min_count, l, r)) {
      const std::string& merged = tr.Text(tr.Merge(l, r));
      if (have.emplace(merged, 0).second) pieces.push_back(merged);
    }
  }
  // Scores fall with rank: earlier merges win in the encoder's greedy loop.
  float score = 0.0f;
  for (const std::string& p : pieces) {
    v.tokens.push_back(p);
    v.types.push_back(TokenType::kNormal);
    v.scores.push_back(score -= 1.0f);
  }
  for (const auto& [c, f] : chars) {
    v.tokens.push_back(c);
    v.types.push_back(TokenType::kNormal);
    v.scores.push_back(score -= 1.0f);
  }
  PadReserved(v, vocab_size);
  return v;
}

}  // namespace specd
