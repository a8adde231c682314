// "gpt2" vocabularies: byte-level BPE. Text is split by the family's
// pre-tokenizer regex, each piece's bytes are mapped to GPT-2's printable
// alphabet, and merges are applied by rank (lowest first, ties leftmost).
#include <queue>
#include <unordered_map>
#include <utility>

#include "common/tokenizer/pretokenize.h"
#include "common/tokenizer/tokenizer_impl.h"
#include "common/tokenizer/unicode.h"

namespace specd::tokenizer_internal {
namespace {

// Merge keys: "left\xFFright"; 0xFF never occurs in UTF-8 text.
std::string MergeKey(std::string_view l, std::string_view r) {
  std::string k;
  k.reserve(l.size() + r.size() + 1);
  k.append(l);
  k.push_back('\xFF');
  k.append(r);
  return k;
}

class BpeTokenizer final : public TokenizerImpl {
 public:
  absl::Status Load(const GgufFile& f) {
    SPECD_RETURN_IF_ERROR(Init(f));
    const std::string file = FileName(f);
    SPECD_ASSIGN_OR_RETURN(std::string pre, f.GetStringOr("tokenizer.ggml.pre", "default"));
    auto kind = ParsePreTokenizer(pre);
    if (!kind.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": tokenizer.ggml.pre: ", kind.status().message()));
    }
    pre_ = *kind;
    // Llama 3's tokenizer takes a whole pre-token that is in the vocab as is.
    ignore_merges_ = pre_ == PreTokenizerKind::kLlama3;

    if (!f.Has("tokenizer.ggml.merges")) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": tokenizer.ggml.merges is missing (needed by gpt2)"));
    }
    SPECD_ASSIGN_OR_RETURN(std::vector<std::string> merges, ReadStringArray(f, "tokenizer.ggml.merges"));
    ranks_.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); ++i) {
      const std::string& m = merges[i];
      // "left right": one space, searched from 1 as llama.cpp does.
      const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
      if (sp == std::string::npos || sp + 1 >= m.size() || m.find(' ', sp + 1) != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(file, ": tokenizer.ggml.merges[", i, "] = \"", m,
                                                       "\" is not of the form \"left right\""));
      }
      ranks_.emplace(MergeKey(std::string_view(m).substr(0, sp), std::string_view(m).substr(sp + 1)),
                     static_cast<int32_t>(i));  // first occurrence keeps its rank
    }
    const auto& b2u = ByteToUnicode();
    for (int b = 0; b < 256; ++b) byte_ids_[b] = FindToken(b2u[b]);
    return absl::OkStatus();
  }

  std::string_view model() const override { return "gpt2"; }

  std::vector<int32_t> Encode(std::string_view text, bool add_special, bool parse_special) const override {
    std::vector<int32_t> out;
    if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);
    const auto& b2u = ByteToUnicode();
    std::string word;
    std::unordered_map<std::string_view, std::pair<size_t, size_t>> seen;  // piece -> ids in out
    for (const Fragment& fr : Partition(text, parse_special)) {
      if (fr.id >= 0) {
        out.push_back(fr.id);
        continue;
      }
      for (std::string_view piece : PreTokenize(pre_, fr.text)) {
        // Words repeat a lot in real text: reuse the ids of an earlier occurrence.
        auto [it, fresh] = seen.try_emplace(piece, out.size(), 0);
        if (!fresh) {
          for (size_t k = 0; k < it->second.second; ++k) {
            const int32_t id = out[it->second.first + k];  // copy: push_back may reallocate
            out.push_back(id);
          }
          continue;
        }
        word.clear();
        for (char c : piece) word += b2u[static_cast<uint8_t>(c)];
        EncodeWord(word, out);
        it->second.second = out.size() - it->second.first;
      }
    }
    if (add_special && add_eos_ && eos_ >= 0) out.push_back(eos_);
    return out;
  }

  std::string TokenBytes(int32_t id, bool special) const override {
    if (id < 0 || id >= vocab_size()) return "";
    const std::string& t = tokens_[id];
    switch (Type(id)) {
      case TokenType::kNormal: {
        std::string out;
        for (const auto& c : unicode::Decode(t)) {
          const int b = UnicodeToByte(c.cp);
          if (b >= 0) {
            out.push_back(static_cast<char>(b));
          } else {
            out.append(t, c.offset, c.len);  // not byte-level: keep as written
          }
        }
        return out;
      }
      case TokenType::kUnknown:
      case TokenType::kUserDefined:
        return t;
      case TokenType::kControl:
        return special ? t : "";
      default:
        return "";
    }
  }

 private:
  struct Symbol {
    int prev, next;
    size_t off, n;
  };
  struct Bigram {
    int left, right;
    int32_t rank;
    size_t lsize, rsize;
  };
  struct BigramGreater {
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
  };

  void EncodeWord(const std::string& word, std::vector<int32_t>& out) const {
    if (word.empty()) return;
    if (ignore_merges_) {
      const int32_t id = FindToken(word);
      if (id >= 0) {
        out.push_back(id);
        return;
      }
    }
    std::vector<Symbol> sym;
    for (std::string_view c : unicode::SplitChars(word)) {
      const int idx = static_cast<int>(sym.size());
      sym.push_back({idx - 1, idx + 1, static_cast<size_t>(c.data() - word.data()), c.size()});
    }
    sym.back().next = -1;

    if (sym.size() == 1) {
      const int32_t id = FindToken(word);
      if (id >= 0) {
        out.push_back(id);
        return;
      }
    }
    std::priority_queue<Bigram, std::vector<Bigram>, BigramGreater> queue;
    const std::string_view w(word);
    std::string key;  // reused: no allocation per candidate pair
    auto try_add = [&](int left, int right) {
      if (left < 0 || right < 0) return;
      key.assign(w.substr(sym[left].off, sym[left].n));
      key.push_back('\xFF');
      key.append(w.substr(sym[right].off, sym[right].n));
      auto it = ranks_.find(key);
      if (it == ranks_.end()) return;
      queue.push({left, right, it->second, sym[left].n, sym[right].n});
    };
    for (size_t i = 1; i < sym.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));

    while (!queue.empty()) {
      const Bigram bg = queue.top();
      queue.pop();
      Symbol& l = sym[bg.left];
      Symbol& r = sym[bg.right];
      // Symbols only grow, so unchanged sizes mean the pair is still current.
      if (l.n != bg.lsize || r.n != bg.rsize || l.next != bg.right) continue;
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = bg.left;
      try_add(l.prev, bg.left);
      try_add(bg.left, l.next);
    }

    for (int i = 0; i >= 0; i = sym[i].next) {
      const std::string_view piece = w.substr(sym[i].off, sym[i].n);
      const int32_t id = FindToken(piece);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      // A merge result missing from the vocab: fall back to its byte tokens.
      for (const auto& c : unicode::Decode(piece)) {
        const int b = UnicodeToByte(c.cp);
        const int32_t bid = b >= 0 ? byte_ids_[b] : -1;
        if (bid >= 0) {
          out.push_back(bid);
        } else if (unk_ >= 0) {
          out.push_back(unk_);
        }
      }
    }
  }

  PreTokenizerKind pre_ = PreTokenizerKind::kGpt2;
  bool ignore_merges_ = false;
  std::unordered_map<std::string, int32_t> ranks_;
  std::array<int32_t, 256> byte_ids_{};
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> NewBpeTokenizer(const GgufFile& f) {
  auto t = std::make_unique<BpeTokenizer>();
  SPECD_RETURN_IF_ERROR(t->Load(f));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace specd::tokenizer_internal
