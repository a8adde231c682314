// "llama" vocabularies: SentencePiece BPE as llama.cpp's llm_tokenizer_spm
// runs it: ' ' -> '▁' (plus a '▁' prefix), start from UTF-8 characters, merge
// the adjacent pair whose concatenation is the highest-scoring vocab token
// (ties: leftmost) until none is left, then bytes of what is not a token go
// out as <0xNN> byte tokens.
#include <cstdio>
#include <queue>

#include "common/tokenizer/tokenizer_impl.h"
#include "common/tokenizer/unicode.h"

namespace specd::tokenizer_internal {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581 '▁'

std::string EscapeWhitespace(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (char c : s) {
    if (c == ' ') {
      out += kSpace;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

class SpmTokenizer final : public TokenizerImpl {
 public:
  absl::Status Load(const GgufFile& f) {
    SPECD_RETURN_IF_ERROR(Init(f));
    SPECD_ASSIGN_OR_RETURN(add_space_prefix_, ReadBoolOr(f, "tokenizer.ggml.add_space_prefix", true));
    byte_ids_.fill(-1);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      byte_ids_[b] = FindToken(name);
    }
    return absl::OkStatus();
  }

  std::string_view model() const override { return "llama"; }

  std::vector<int32_t> Encode(std::string_view text, bool add_special, bool parse_special) const override {
    std::vector<int32_t> out;
    if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);
    bool prev_special = true;  // the text's start gets the prefix too
    for (const Fragment& fr : Partition(text, parse_special)) {
      if (fr.id >= 0) {
        out.push_back(fr.id);
        prev_special = true;
        continue;
      }
      std::string s = (add_space_prefix_ && prev_special) ? " " : "";
      s.append(fr.text);
      EncodeEscaped(EscapeWhitespace(s), out);
      prev_special = false;
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
        for (size_t i = 0; i < t.size();) {
          if (t.compare(i, kSpace.size(), kSpace) == 0) {
            out.push_back(' ');
            i += kSpace.size();
          } else {
            out.push_back(t[i++]);
          }
        }
        return out;
      }
      case TokenType::kByte: {
        unsigned v = 0;
        if (t.size() == 6 && std::sscanf(t.c_str(), "<0x%2X>", &v) == 1) return std::string(1, static_cast<char>(v));
        return "";
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
    float score;
    size_t size;
  };
  struct BigramLess {
    bool operator()(const Bigram& a, const Bigram& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };

  void EncodeEscaped(const std::string& text, std::vector<int32_t>& out) const {
    std::vector<Symbol> sym;
    for (std::string_view c : unicode::SplitChars(text)) {
      const int idx = static_cast<int>(sym.size());
      sym.push_back({idx - 1, idx + 1, static_cast<size_t>(c.data() - text.data()), c.size()});
    }
    if (sym.empty()) return;
    sym.back().next = -1;

    std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue;
    auto try_add = [&](int left, int right) {
      if (left < 0 || right < 0) return;
      const size_t size = sym[left].n + sym[right].n;
      const int32_t id = FindToken(std::string_view(text).substr(sym[left].off, size));
      if (id < 0) return;
      queue.push({left, right, scores_[id], size});
    };
    for (size_t i = 1; i < sym.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));

    while (!queue.empty()) {
      const Bigram bg = queue.top();
      queue.pop();
      Symbol& l = sym[bg.left];
      Symbol& r = sym[bg.right];
      // Stale: one side was merged away or grew since this pair was queued.
      if (l.n == 0 || r.n == 0 || l.n + r.n != bg.size) continue;
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) sym[r.next].prev = bg.left;
      try_add(l.prev, bg.left);
      try_add(bg.left, l.next);
    }

    for (int i = 0; i >= 0; i = sym[i].next) {
      const std::string_view piece = std::string_view(text).substr(sym[i].off, sym[i].n);
      const int32_t id = FindToken(piece);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      for (char c : piece) {  // byte fallback
        const int32_t b = byte_ids_[static_cast<uint8_t>(c)];
        if (b >= 0) {
          out.push_back(b);
        } else if (unk_ >= 0) {
          out.push_back(unk_);
        }
      }
    }
  }

  bool add_space_prefix_ = true;
  std::array<int32_t, 256> byte_ids_{};
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> NewSpmTokenizer(const GgufFile& f) {
  auto t = std::make_unique<SpmTokenizer>();
  SPECD_RETURN_IF_ERROR(t->Load(f));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace specd::tokenizer_internal
