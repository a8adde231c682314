#include "common/tokenizer/tokenizer.h"

#include <algorithm>
#include <cmath>

#include "common/tokenizer/tokenizer_impl.h"
#include "common/tokenizer/unicode.h"
#include "common/util/digest.h"

namespace specd {

using tokenizer_internal::FileName;
using tokenizer_internal::ReadBoolOr;
using tokenizer_internal::ReadFloatArray;
using tokenizer_internal::ReadIntArray;
using tokenizer_internal::ReadStringArray;

namespace tokenizer_internal {

std::string FileName(const GgufFile& f) { return f.path().empty() ? std::string("<gguf>") : f.path(); }

absl::StatusOr<std::vector<int64_t>> ReadIntArray(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr) return std::vector<int64_t>{};
  if (v->type != GgufValueType::ARRAY || !GgufIsIntegerType(v->elem_type)) {
    return absl::InvalidArgumentError(
        absl::StrCat(FileName(f), ": ", std::string(key), " must be an array of integers"));
  }
  if (!v->arr_int.empty()) return v->arr_int;
  std::vector<int64_t> out;
  out.reserve(v->arr_uint.size());
  for (uint64_t u : v->arr_uint) {
    out.push_back(u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(u));
  }
  return out;
}

absl::StatusOr<std::vector<double>> ReadFloatArray(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr) return std::vector<double>{};
  if (v->type != GgufValueType::ARRAY ||
      (v->elem_type != GgufValueType::FLOAT32 && v->elem_type != GgufValueType::FLOAT64)) {
    return absl::InvalidArgumentError(absl::StrCat(FileName(f), ": ", std::string(key), " must be an array of floats"));
  }
  return v->arr_float;
}

absl::StatusOr<std::vector<std::string>> ReadStringArray(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr) return std::vector<std::string>{};
  if (v->type != GgufValueType::ARRAY || v->elem_type != GgufValueType::STRING) {
    return absl::InvalidArgumentError(
        absl::StrCat(FileName(f), ": ", std::string(key), " must be an array of strings"));
  }
  return v->arr_str;
}

absl::StatusOr<bool> ReadBoolOr(const GgufFile& f, std::string_view key, bool def) {
  if (!f.Has(key)) return def;
  return f.GetBool(key);
}

const std::array<std::string, 256>& ByteToUnicode() {
  // GPT-2: printable Latin-1 bytes map to themselves, the other 68 bytes to
  // U+0100.. in byte order, so every byte becomes a visible character.
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      unicode::AppendUtf8(printable ? b : next++, t[b]);
    }
    return t;
  }();
  return table;
}

int UnicodeToByte(uint32_t cp) {
  static const std::array<int16_t, 512> table = [] {
    std::array<int16_t, 512> t;
    t.fill(-1);
    const auto& fwd = ByteToUnicode();
    for (int b = 0; b < 256; ++b) {
      size_t i = 0;
      t[unicode::DecodeOne(fwd[b], i)] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return cp < table.size() ? table[cp] : -1;
}

absl::Status TokenizerImpl::Init(const GgufFile& f) {
  SPECD_RETURN_IF_ERROR(LoadCommon(f));
  std::vector<int32_t> specials;
  for (int32_t id = 0; id < vocab_size(); ++id) {
    const TokenType t = Type(id);
    if ((t == TokenType::kControl || t == TokenType::kUnknown || t == TokenType::kUserDefined) &&
        !tokens_[id].empty()) {
      specials.push_back(id);
    }
  }
  // Longest first so the first hit at a position is the longest match.
  std::stable_sort(specials.begin(), specials.end(),
                   [&](int32_t a, int32_t b) { return tokens_[a].size() > tokens_[b].size(); });
  for (int32_t id : specials) specials_by_byte_[static_cast<uint8_t>(tokens_[id][0])].push_back(id);
  return absl::OkStatus();
}

std::vector<TokenizerImpl::Fragment> TokenizerImpl::Partition(std::string_view text, bool parse_special) const {
  std::vector<Fragment> out;
  size_t raw_start = 0, i = 0;
  while (i < text.size()) {
    int32_t hit = -1;
    for (int32_t id : specials_by_byte_[static_cast<uint8_t>(text[i])]) {
      if (!parse_special && Type(id) != TokenType::kUserDefined) continue;
      const std::string& t = tokens_[id];
      if (text.compare(i, t.size(), t) == 0) {
        hit = id;
        break;
      }
    }
    if (hit < 0) {
      ++i;
      continue;
    }
    if (i > raw_start) out.push_back({text.substr(raw_start, i - raw_start), -1});
    out.push_back({text.substr(i, tokens_[hit].size()), hit});
    i += tokens_[hit].size();
    raw_start = i;
  }
  if (raw_start < text.size()) out.push_back({text.substr(raw_start), -1});
  return out;
}

}  // namespace tokenizer_internal

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const GgufFile& f) {
  if (!f.Has("tokenizer.ggml.model")) {
    return absl::InvalidArgumentError(absl::StrCat(FileName(f), ": no tokenizer (tokenizer.ggml.model is missing)"));
  }
  SPECD_ASSIGN_OR_RETURN(std::string model, f.GetString("tokenizer.ggml.model"));
  if (model == "llama") return tokenizer_internal::NewSpmTokenizer(f);
  if (model == "gpt2") return tokenizer_internal::NewBpeTokenizer(f);
  return absl::InvalidArgumentError(absl::StrCat(FileName(f), ": unsupported tokenizer model '", model,
                                                 "' in tokenizer.ggml.model (supported: llama, gpt2)"));
}

absl::Status Tokenizer::LoadCommon(const GgufFile& f) {
  const std::string file = FileName(f);
  SPECD_ASSIGN_OR_RETURN(std::string model, f.GetStringOr("tokenizer.ggml.model", ""));
  SPECD_ASSIGN_OR_RETURN(tokens_, ReadStringArray(f, "tokenizer.ggml.tokens"));
  if (tokens_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": tokenizer.ggml.tokens is missing or empty"));
  }
  if (tokens_.size() > static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": tokenizer.ggml.tokens has too many entries"));
  }
  const size_t n = tokens_.size();
  auto length_error = [&](std::string_view key, size_t got) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": ", std::string(key), " has ", got,
                                                   " entries but tokenizer.ggml.tokens has ", n));
  };

  SPECD_ASSIGN_OR_RETURN(std::vector<double> scores, ReadFloatArray(f, "tokenizer.ggml.scores"));
  if (!scores.empty() && scores.size() != n) return length_error("tokenizer.ggml.scores", scores.size());
  scores_.assign(n, 0.0f);
  for (size_t i = 0; i < scores.size(); ++i) {
    // NaN would break the merge queue's ordering.
    if (std::isnan(scores[i])) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": tokenizer.ggml.scores[", i, "] is NaN"));
    }
    scores_[i] = static_cast<float>(scores[i]);
  }

  SPECD_ASSIGN_OR_RETURN(std::vector<int64_t> types, ReadIntArray(f, "tokenizer.ggml.token_type"));
  if (!types.empty() && types.size() != n) return length_error("tokenizer.ggml.token_type", types.size());
  types_.assign(n, TokenType::kNormal);
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] < 0 || types[i] > static_cast<int64_t>(TokenType::kByte)) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": tokenizer.ggml.token_type[", i, "] = ", types[i],
                                                     " is not a token type (0..6)"));
    }
    types_[i] = static_cast<TokenType>(types[i]);
  }

  token_to_id_.clear();
  token_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) token_to_id_[tokens_[i]] = static_cast<int32_t>(i);

  // Special ids: absent or the "none" marker (-1 / u32 max, as some converters
  // write) mean none; anything else must name a token.
  auto read_id = [&](std::string_view key, int32_t& out) -> absl::Status {
    out = -1;
    if (!f.Has(key)) return absl::OkStatus();
    SPECD_ASSIGN_OR_RETURN(int64_t v, f.GetInt(key));
    if (v == -1 || v == 0xFFFFFFFFll) return absl::OkStatus();
    if (v < 0 || v >= static_cast<int64_t>(n)) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": ", std::string(key), " = ", v, " is out of range (vocabulary has ", n, " tokens)"));
    }
    out = static_cast<int32_t>(v);
    return absl::OkStatus();
  };
  int32_t eot = -1, eom = -1;
  SPECD_RETURN_IF_ERROR(read_id("tokenizer.ggml.bos_token_id", bos_));
  SPECD_RETURN_IF_ERROR(read_id("tokenizer.ggml.eos_token_id", eos_));
  SPECD_RETURN_IF_ERROR(read_id("tokenizer.ggml.padding_token_id", pad_));
  SPECD_RETURN_IF_ERROR(read_id("tokenizer.ggml.unknown_token_id", unk_));
  SPECD_RETURN_IF_ERROR(read_id("tokenizer.ggml.eot_token_id", eot));
  SPECD_RETURN_IF_ERROR(read_id("tokenizer.ggml.eom_token_id", eom));
  // llama.cpp's defaults: SentencePiece vocabs add bos unless told otherwise.
  SPECD_ASSIGN_OR_RETURN(add_bos_, ReadBoolOr(f, "tokenizer.ggml.add_bos_token", model == "llama"));
  SPECD_ASSIGN_OR_RETURN(add_eos_, ReadBoolOr(f, "tokenizer.ggml.add_eos_token", false));
  SPECD_ASSIGN_OR_RETURN(chat_template_, f.GetStringOr("tokenizer.chat_template", ""));

  // End of generation: the declared ids plus the end-of-turn markers of the
  // families we serve, when the vocab has them as special tokens.
  eog_.clear();
  auto add_eog = [&](int32_t id) {
    if (id >= 0 && std::find(eog_.begin(), eog_.end(), id) == eog_.end()) eog_.push_back(id);
  };
  add_eog(eos_);
  add_eog(eot);
  add_eog(eom);
  for (std::string_view t : {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|endoftext|>", "<|end_of_text|>",
                             "<|end|>", "<end_of_turn>"}) {
    const int32_t id = FindToken(t);
    if (id >= 0 && (Type(id) == TokenType::kControl || Type(id) == TokenType::kUserDefined)) add_eog(id);
  }
  return absl::OkStatus();
}

bool Tokenizer::IsEog(int32_t id) const { return std::find(eog_.begin(), eog_.end(), id) != eog_.end(); }

int32_t Tokenizer::FindToken(std::string_view text) const {
  auto it = token_to_id_.find(text);
  return it == token_to_id_.end() ? -1 : it->second;
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, bool special) const {
  std::string out;
  for (int32_t id : ids) out += TokenBytes(id, special);
  return out;
}

std::string Tokenizer::VocabDigest() const {
  Sha256 h;
  h.Update("specd-vocab-v1");
  auto put32 = [&](uint32_t v) {
    const uint8_t b[4] = {static_cast<uint8_t>(v), static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v >> 16),
                          static_cast<uint8_t>(v >> 24)};
    h.Update(b, 4);
  };
  put32(static_cast<uint32_t>(tokens_.size()));
  for (size_t i = 0; i < tokens_.size(); ++i) {
    put32(static_cast<uint32_t>(tokens_[i].size()));  // length-prefixed: no ambiguity
    h.Update(tokens_[i]);
    put32(static_cast<uint32_t>(Type(static_cast<int32_t>(i))));
  }
  return h.FinalHex();
}

namespace {

bool IsStripSpace(uint32_t cp) {  // Python's str.isspace(), what Jinja's trim uses
  return unicode::IsWhitespace(cp) || (cp >= 0x1C && cp <= 0x1F);
}

std::string Trim(std::string_view s) {
  const auto cps = unicode::Decode(s);
  size_t a = 0, b = cps.size();
  while (a < b && IsStripSpace(cps[a].cp)) ++a;
  while (b > a && IsStripSpace(cps[b - 1].cp)) --b;
  if (a == b) return "";
  return std::string(s.substr(cps[a].offset, cps[b - 1].offset + cps[b - 1].len - cps[a].offset));
}

// The string literals of a Jinja template, unescaped.
std::vector<std::string> JinjaStringLiterals(std::string_view t) {
  std::vector<std::string> out;
  bool in_code = false;
  for (size_t i = 0; i < t.size(); ++i) {
    if (!in_code) {
      if (t[i] == '{' && i + 1 < t.size() && (t[i + 1] == '{' || t[i + 1] == '%')) {
        in_code = true;
        ++i;
      }
      continue;
    }
    if ((t[i] == '}' || t[i] == '%') && i + 1 < t.size() && t[i + 1] == '}') {
      in_code = false;
      ++i;
      continue;
    }
    if (t[i] != '\'' && t[i] != '"') continue;
    const char q = t[i];
    std::string lit;
    size_t j = i + 1;
    for (; j < t.size() && t[j] != q; ++j) {
      if (t[j] == '\\' && j + 1 < t.size()) {
        const char e = t[++j];
        lit.push_back(e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e);
      } else {
        lit.push_back(t[j]);
      }
    }
    out.push_back(std::move(lit));
    i = j;
  }
  return out;
}

// A ChatML template's built-in system prompt (used when the conversation has
// none), e.g. SmolLM2's "You are a helpful AI assistant named SmolLM, ...".
std::string ChatMlDefaultSystem(std::string_view tmpl) {
  if (tmpl.find("messages[0]['role']") == std::string_view::npos &&
      tmpl.find("messages[0][\"role\"]") == std::string_view::npos &&
      tmpl.find("messages[0].role") == std::string_view::npos) {
    return "";
  }
  constexpr std::string_view kOpen = "<|im_start|>system\n", kClose = "<|im_end|>\n";
  for (const std::string& lit : JinjaStringLiterals(tmpl)) {
    if (lit.size() > kOpen.size() + kClose.size() && lit.starts_with(kOpen) && lit.ends_with(kClose)) {
      std::string body = lit.substr(kOpen.size(), lit.size() - kOpen.size() - kClose.size());
      if (body.find("<|im_") == std::string::npos) return body;
    }
  }
  return "";
}

}  // namespace

absl::StatusOr<std::string> Tokenizer::ApplyChatTemplate(const std::vector<ChatMessage>& msgs,
                                                         bool add_generation_prompt) const {
  if (chat_template_.empty()) return absl::FailedPreconditionError("model has no chat template");
  std::string out;
  if (chat_template_.find("<|im_start|>") != std::string::npos) {
    const std::string def_system = ChatMlDefaultSystem(chat_template_);
    if (!def_system.empty() && !msgs.empty() && msgs[0].role != "system") {
      absl::StrAppend(&out, "<|im_start|>system\n", def_system, "<|im_end|>\n");
    }
    for (const auto& m : msgs) absl::StrAppend(&out, "<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
    return out;
  }
  if (chat_template_.find("<|start_header_id|>") != std::string::npos) {
    const bool trim = chat_template_.find("| trim") != std::string::npos ||
                      chat_template_.find("|trim") != std::string::npos;
    out = "<|begin_of_text|>";
    for (const auto& m : msgs) {
      absl::StrAppend(&out, "<|start_header_id|>", m.role, "<|end_header_id|>\n\n",
                      trim ? Trim(m.content) : m.content, "<|eot_id|>");
    }
    if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
  }
  std::string head = chat_template_.substr(0, 60);
  for (char& c : head) {
    if (c == '\n') c = ' ';
  }
  return absl::UnimplementedError(absl::StrCat(
      "unsupported chat template (only ChatML and Llama 3 templates are supported): \"", head,
      chat_template_.size() > head.size() ? "...\"" : "\""));
}

std::string StreamDecoder::Push(int32_t id) {
  if (tok_ == nullptr || id < 0 || id >= tok_->vocab_size()) return "";
  pending_ += tok_->TokenBytes(id);
  std::string out;
  size_t i = 0;
  while (i < pending_.size()) {
    const auto b = static_cast<uint8_t>(pending_[i]);
    const int n = unicode::Utf8SeqLen(b);
    if (n > 1 && i + n > pending_.size()) {
      // Hold back only a valid prefix of a character; a broken one is garbage now.
      bool prefix_ok = true;
      for (size_t k = i + 1; k < pending_.size(); ++k) {
        prefix_ok &= (static_cast<uint8_t>(pending_[k]) & 0xC0) == 0x80;
      }
      if (prefix_ok) break;
    }
    size_t j = i;
    const uint32_t cp = unicode::DecodeOne(pending_, j);
    if (cp == 0xFFFD && j - i == 1) {
      out += "\xEF\xBF\xBD";
    } else {
      out.append(pending_, i, j - i);
    }
    i = j;
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::Flush() {
  // Whatever is held back is a truncated character: one replacement for it.
  std::string out = pending_.empty() ? "" : "\xEF\xBF\xBD";
  pending_.clear();
  return out;
}

}  // namespace specd
