#include "common/modelgen/modelgen.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <sstream>
#include <tuple>
#include <utility>

#include "common/gguf/file_type.h"
#include "common/gguf/gguf.h"
#include "common/quant/block_random.h"
#include "common/quant/quant.h"
#include "common/sampler/rng.h"
#include "common/tokenizer/vocab_builder.h"
#include "common/util/thread_pool.h"

namespace specd {

int64_t ModelShape::ParamCount() const {
  const int64_t d = d_model, hd = HeadDim(), q = int64_t{n_heads} * hd, kv = int64_t{n_kv_heads} * hd;
  const int64_t per_layer = d * q + 2 * d * kv + q * d + 3 * d * ffn_dim + 2 * d;
  return per_layer * n_layers + int64_t{vocab_size} * d * (tied_output ? 1 : 2) + d;
}

absl::Status ModelShape::Validate() const {
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3")
    return absl::InvalidArgumentError(absl::StrCat("unknown arch '", arch, "' (llama, qwen2, qwen3)"));
  if (n_layers < 1 || d_model < 1 || n_heads < 1 || n_kv_heads < 1 || ffn_dim < 1 || vocab_size < 1 || ctx < 1)
    return absl::InvalidArgumentError("model dimensions must be positive");
  if (n_heads % n_kv_heads != 0) return absl::InvalidArgumentError("n_heads must be a multiple of n_kv_heads");
  if (head_dim == 0 && d_model % n_heads != 0)
    return absl::InvalidArgumentError("d_model must be a multiple of n_heads (or give head_dim)");
  if (HeadDim() % 2 != 0) return absl::InvalidArgumentError("head dimension must be even");
  return absl::OkStatus();
}

std::string ModelShape::Describe() const {
  std::ostringstream os;
  os << arch << " layers=" << n_layers << " d=" << d_model << " heads=" << n_heads << "/" << n_kv_heads
     << " head_dim=" << HeadDim() << " ffn=" << ffn_dim << " vocab=" << vocab_size << " ctx=" << ctx
     << " params=" << ParamCount();
  return os.str();
}

ModelConfig ToModelConfig(const ModelShape& s) {
  ModelConfig c;
  c.arch = s.arch == "qwen2" ? Arch::kQwen2 : s.arch == "qwen3" ? Arch::kQwen3 : Arch::kLlama;
  c.name = "synthetic";
  c.n_layers = s.n_layers;
  c.d_model = s.d_model;
  c.n_heads = s.n_heads;
  c.n_kv_heads = s.n_kv_heads;
  c.head_dim = s.HeadDim();
  c.ffn_dim = s.ffn_dim;
  c.vocab_size = s.vocab_size;
  c.ctx_train = s.ctx;
  c.rms_eps = 1e-6f;  // as GenerateModel writes it
  c.rope.style = c.arch == Arch::kLlama ? RopeStyle::kNormal : RopeStyle::kNeox;
  c.rope.n_dims = c.head_dim;
  c.rope.freq_base = s.rope_base;
  c.qkv_bias = c.arch == Arch::kQwen2;
  c.qk_norm = c.arch == Arch::kQwen3;
  c.tied_output = s.tied_output;
  return c;
}

namespace {
struct Preset {
  const char* name;
  const char* what;
  ModelShape shape;
};
ModelShape S(const char* arch, int layers, int d, int h, int kvh, int hd, int ffn, int vocab, int ctx, bool tied,
             float base = 10000.0f) {
  ModelShape s;
  s.arch = arch;
  s.n_layers = layers;
  s.d_model = d;
  s.n_heads = h;
  s.n_kv_heads = kvh;
  s.head_dim = hd;
  s.ffn_dim = ffn;
  s.vocab_size = vocab;
  s.ctx = ctx;
  s.tied_output = tied;
  s.rope_base = base;
  return s;
}
const Preset kPresets[] = {
    {"tiny", "2-layer llama test model", S("llama", 2, 64, 4, 2, 0, 128, 512, 2048, false)},
    {"tiny-qwen2", "2-layer qwen2 test model (qkv biases)", S("qwen2", 2, 64, 4, 2, 0, 128, 512, 2048, false, 1e6f)},
    {"tiny-qwen3", "2-layer qwen3 test model (q/k norms)", S("qwen3", 2, 64, 4, 2, 32, 128, 512, 2048, true, 1e6f)},
    {"small", "4-layer llama demo model", S("llama", 4, 256, 8, 4, 0, 768, 2048, 4096, false)},
    {"100m", "~100M-parameter llama (CPU benchmarks)", S("llama", 12, 768, 12, 4, 0, 2048, 8192, 4096, false)},
    {"1b", "~1B-parameter llama (GPU end-to-end runs)", S("llama", 16, 2048, 16, 8, 0, 5632, 32000, 4096, false)},
    {"qwen3-32b", "32B-class target (Qwen3-32B shape)", S("qwen3", 64, 5120, 64, 8, 128, 25600, 151936, 40960, false, 1e6f)},
    {"qwen3-27b", "27B-class target (Qwen3-32B widths, 54 layers)", S("qwen3", 54, 5120, 64, 8, 128, 25600, 151936, 40960, false, 1e6f)},
    {"qwen3-0.6b", "0.6B-class draft (Qwen3-0.6B shape)", S("qwen3", 28, 1024, 16, 8, 128, 3072, 151936, 40960, true, 1e6f)},
    {"qwen3-1.7b", "1.7B-class draft (Qwen3-1.7B shape)", S("qwen3", 28, 2048, 16, 8, 128, 6144, 151936, 40960, true, 1e6f)},
    {"qwen2.5-3b", "3B-class draft (Qwen2.5-3B shape)", S("qwen2", 36, 2048, 16, 2, 128, 11008, 151936, 32768, true, 1e6f)},
    {"qwen3-4b", "4B-class draft (Qwen3-4B shape)", S("qwen3", 36, 2560, 32, 8, 128, 9728, 151936, 40960, true, 1e6f)},
};
}  // namespace

absl::StatusOr<ModelShape> PresetShape(const std::string& name) {
  for (const auto& p : kPresets) {
    if (name == p.name) return p.shape;
  }
  std::string names;
  for (const auto& p : kPresets) names += std::string(names.empty() ? "" : ", ") + p.name;
  return absl::NotFoundError(absl::StrCat("unknown model preset '", name, "' (", names, ")"));
}

std::vector<std::string> PresetNames() {
  std::vector<std::string> out;
  for (const auto& p : kPresets) out.push_back(std::string(p.name) + ": " + p.what);
  return out;
}

absl::StatusOr<GgmlType> MixTypeFor(const std::string& mix, const std::string& name, int layer, int n_layers) {
  if (auto t = TypeFromName(mix)) {
    if (!CanQuantize(*t)) return absl::InvalidArgumentError(absl::StrCat("cannot quantize to ", mix));
    return *t;
  }
  // llama.cpp-style mixes: more bits where errors hurt most (output head,
  // attention values and FFN down-projections of the first and last layers).
  const bool more_bits = layer >= 0 && (layer < n_layers / 8 || layer >= 7 * n_layers / 8 ||
                                        (layer - n_layers / 8) % 3 == 2);
  const bool is_out = name == "output.weight";
  const bool is_v = name.find("attn_v.weight") != std::string::npos;
  const bool is_down = name.find("ffn_down.weight") != std::string::npos;
  if (mix == "Q4_K_M") {
    if (is_out) return GgmlType::Q6_K;
    if ((is_v || is_down) && more_bits) return GgmlType::Q6_K;
    return GgmlType::Q4_K;
  }
  if (mix == "Q4_K_S") {
    if (is_out) return GgmlType::Q6_K;
    if (is_down && layer >= 0 && layer < n_layers / 8) return GgmlType::Q5_K;
    return GgmlType::Q4_K;
  }
  if (mix == "Q5_K_M") {
    if (is_out) return GgmlType::Q6_K;
    if ((is_v || is_down) && more_bits) return GgmlType::Q6_K;
    return GgmlType::Q5_K;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown weight type or mix '", mix,
                                                 "' (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K Q4_K_M Q4_K_S Q5_K_M)"));
}

namespace {

// Element i of a tensor's deterministic Gaussian sequence: Box-Muller pairs
// (cos for even i, sin for odd) from counter-based uniforms, so any element
// can be computed independently and tensors are generated in parallel.
float GaussAt(uint64_t key, uint64_t i) {
  const uint64_t p = i / 2;
  const double u1 = std::max(Uniform01(key, 0, 2 * p), 1e-300);
  const double u2 = Uniform01(key, 0, 2 * p + 1);
  const double r = std::sqrt(-2.0 * std::log(u1));
  return static_cast<float>(r * (i % 2 ? std::sin(2 * M_PI * u2) : std::cos(2 * M_PI * u2)));
}

uint64_t TensorKey(uint64_t seed, const std::string& name) { return Mix64(seed ^ WeightNameHash(name)); }

ThreadPool& Pool() {
  static ThreadPool pool(0);
  return pool;
}

int LayerOf(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  return std::atoi(name.c_str() + 4);
}

bool IsQuantized(GgmlType t) { return TypeTraits(t).block_size > 1; }

// Writes `rows` rows of `ne0` values as type `t`, in parallel: row(r, values)
// fills row r's floats, which are then quantized.
absl::Status QuantizeRows(GgmlType t, int64_t ne0, int64_t rows, uint8_t* dst,
                          const std::function<void(int64_t, float*)>& row) {
  const size_t rb = RowBytes(t, ne0);
  std::atomic<bool> failed{false};
  Pool().ParallelFor(rows, [&](int64_t r0, int64_t r1) {
    std::vector<float> values(static_cast<size_t>(ne0));
    for (int64_t r = r0; r < r1; ++r) {
      row(r, values.data());
      if (!QuantizeRow(t, values.data(), dst + r * rb, ne0).ok()) failed = true;
    }
  });
  if (failed) return absl::InternalError(absl::StrCat("cannot quantize to ", TypeTraits(t).name));
  return absl::OkStatus();
}

// A matrix of Gaussian rows of deviation `stddev`, quantized row by row.
absl::Status FillGaussian(GgmlType t, uint64_t key, int64_t ne0, int64_t ne1, float stddev, uint8_t* dst) {
  return QuantizeRows(t, ne0, ne1, dst, [&](int64_t r, float* row) {
    for (int64_t i = 0; i < ne0; ++i) row[i] = GaussAt(key, static_cast<uint64_t>(r * ne0 + i)) * stddev;
  });
}

absl::Status FillBlocks(GgmlType t, uint64_t key, int64_t ne0, int64_t ne1, float stddev, uint8_t* dst) {
  const int64_t nblocks = ne0 / TypeTraits(t).block_size * ne1;
  const size_t bb = TypeTraits(t).type_size;
  std::atomic<bool> failed{false};
  Pool().ParallelFor(
      nblocks,
      [&](int64_t b0, int64_t b1) {
        if (!RandomBlocks(t, dst + b0 * bb, b0, b1 - b0, key, stddev).ok()) failed = true;
      },
      /*grain=*/256);
  if (failed) return absl::InternalError(absl::StrCat("no random blocks for ", TypeTraits(t).name));
  return absl::OkStatus();
}

// The successor structure (GenOptions::successor_gain): Gaussian embedding
// rows e_x (deviation 1) and head rows
//   h_y = noise_y (deviation 3/sqrt(d)) + gain / d * e_{Prev(y)},
// so that a final hidden state near e_x scores Next(x) about `gain` above the
// head's random logits.
absl::Status FillSuccessorHead(GgmlType t, uint64_t head_key, uint64_t embd_key, const SuccessorMap& succ,
                               float gain, int64_t d, int64_t vocab, uint8_t* dst) {
  const float noise = 3.0f / std::sqrt(static_cast<float>(d)), pull = gain / static_cast<float>(d);
  return QuantizeRows(t, d, vocab, dst, [&](int64_t y, float* row) {
    const uint64_t x = static_cast<uint64_t>(succ.Prev(y));
    for (int64_t i = 0; i < d; ++i)
      row[i] = GaussAt(head_key, static_cast<uint64_t>(y * d + i)) * noise +
               GaussAt(embd_key, x * static_cast<uint64_t>(d) + static_cast<uint64_t>(i)) * pull;
  });
}

// Adds a matrix of the mix's type; sets *quantized when that is a block format.
absl::Status AddMatrix(GgufWriter& w, const GenOptions& o, bool* quantized, const std::string& name, int64_t ne0,
                       int64_t ne1, float stddev) {
  SPECD_ASSIGN_OR_RETURN(GgmlType t, MixTypeFor(o.weight_type, name, LayerOf(name), o.shape.n_layers));
  if (ne0 % TypeTraits(t).block_size != 0) t = GgmlType::F16;  // rows too short for the block format
  *quantized |= IsQuantized(t);
  const uint64_t key = TensorKey(o.seed, name);
  if (o.successor_gain > 0 && name == "output.weight") {
    const uint64_t embd_key = TensorKey(o.seed, "token_embd.weight");
    const float gain = o.successor_gain;
    const SuccessorMap succ(o.successor_seed, ne1);
    return w.AddTensorLazy(name, t, {ne0, ne1}, [=](uint8_t* dst) {
      return FillSuccessorHead(t, key, embd_key, succ, gain, ne0, ne1, dst);
    });
  }
  // The successor structure needs the embedding's values (the head is built from them).
  const bool gaussian = o.fill == WeightFill::kGaussian || (o.successor_gain > 0 && name == "token_embd.weight");
  const auto fill = gaussian ? FillGaussian : FillBlocks;
  return w.AddTensorLazy(name, t, {ne0, ne1},
                         [=](uint8_t* dst) { return fill(t, key, ne0, ne1, stddev, dst); });
}

absl::Status AddVector(GgufWriter& w, const GenOptions& o, const std::string& name, int64_t n, float mean,
                       float stddev) {
  std::vector<float> v(static_cast<size_t>(n));
  const uint64_t key = TensorKey(o.seed, name);
  for (int64_t i = 0; i < n; ++i) v[i] = mean + GaussAt(key, static_cast<uint64_t>(i)) * stddev;
  return w.AddTensorF32(name, {n}, v.data());
}

// general.file_type (llama.cpp's u32 llama_ftype) for a weight type or mix.
absl::Status SetFileType(GgufWriter& w, const std::string& weight_type) {
  const auto ft = FileTypeForWeights(weight_type);
  if (!ft) return absl::InvalidArgumentError(absl::StrCat("no llama.cpp file type for '", weight_type, "'"));
  w.Set(kFileTypeKey, GgufValue::U32(*ft));
  return absl::OkStatus();
}

}  // namespace

SuccessorMap::SuccessorMap(uint64_t seed, int64_t vocab) : v_(std::max<int64_t>(vocab, 1)) {
  // A multiplier coprime with V (so x -> a x + b is a permutation), far from 1.
  const uint64_t h = Mix64(seed ^ 0x5ecc0550a11ULL);
  a_ = v_ > 2 ? static_cast<int64_t>(h % static_cast<uint64_t>(v_ - 2)) + 2 : 1;
  while (std::gcd(a_, v_) != 1) a_ = a_ + 1 < v_ ? a_ + 1 : 1;
  b_ = static_cast<int64_t>(Mix64(h) % static_cast<uint64_t>(v_));
  // a^-1 mod V by the extended Euclidean algorithm.
  int64_t r0 = v_, r1 = a_, t0 = 0, t1 = 1;
  while (r1 != 0) {
    const int64_t q = r0 / r1;
    std::tie(r0, r1) = std::make_pair(r1, r0 - q * r1);
    std::tie(t0, t1) = std::make_pair(t1, t0 - q * t1);
  }
  a_inv_ = ((t0 % v_) + v_) % v_;
}

int64_t SuccessorMap::Next(int64_t x) const {
  return static_cast<int64_t>((static_cast<__int128>(a_) * x + b_) % v_);
}

int64_t SuccessorMap::Prev(int64_t y) const {
  return static_cast<int64_t>((static_cast<__int128>(a_inv_) * ((y - b_ + v_) % v_)) % v_);
}

absl::Status GenerateModel(const GenOptions& opts, const std::string& path) {
  GenOptions o = opts;
  if (o.successor_gain > 0) o.shape.tied_output = false;  // the head carries the structure
  const ModelShape& s = o.shape;
  SPECD_RETURN_IF_ERROR(s.Validate());
  // An unknown type or mix is refused before anything is written.
  SPECD_RETURN_IF_ERROR(MixTypeFor(o.weight_type, "output.weight", -1, s.n_layers).status());
  GgufWriter w;
  const std::string a = s.arch + ".";
  w.Set("general.architecture", GgufValue::Str(s.arch));
  w.Set("general.name", GgufValue::Str(o.name.empty() ? "specd-generated-" + s.arch : o.name));
  SPECD_RETURN_IF_ERROR(SetFileType(w, o.weight_type));
  w.Set("specd.generator.seed", GgufValue::U64(o.seed));
  w.Set("specd.generator.fill", GgufValue::Str(WeightFillName(o.fill)));
  if (o.successor_gain > 0) {
    w.Set("specd.generator.successor_gain", GgufValue::F32(o.successor_gain));
    w.Set("specd.generator.successor_seed", GgufValue::U64(o.successor_seed));
  }
  w.Set(a + "block_count", GgufValue::U32(s.n_layers));
  w.Set(a + "context_length", GgufValue::U32(s.ctx));
  w.Set(a + "embedding_length", GgufValue::U32(s.d_model));
  w.Set(a + "feed_forward_length", GgufValue::U32(s.ffn_dim));
  w.Set(a + "attention.head_count", GgufValue::U32(s.n_heads));
  w.Set(a + "attention.head_count_kv", GgufValue::U32(s.n_kv_heads));
  if (s.head_dim > 0) {
    w.Set(a + "attention.key_length", GgufValue::U32(s.head_dim));
    w.Set(a + "attention.value_length", GgufValue::U32(s.head_dim));
  }
  w.Set(a + "attention.layer_norm_rms_epsilon", GgufValue::F32(1e-6f));
  w.Set(a + "rope.freq_base", GgufValue::F32(s.rope_base));

  BuiltVocab vocab;
  if (o.vocab == "gpt2") {
    SPECD_ASSIGN_OR_RETURN(vocab, BuildByteLevelBpeVocab(s.vocab_size));
  } else if (o.vocab == "llama") {
    SPECD_ASSIGN_OR_RETURN(vocab, BuildSpmVocab(s.vocab_size));
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown vocabulary kind '", o.vocab, "' (gpt2, llama)"));
  }
  vocab.WriteToGguf(w);

  const int64_t d = s.d_model, hd = s.HeadDim(), q = int64_t{s.n_heads} * hd, kv = int64_t{s.n_kv_heads} * hd;
  const int64_t V = s.vocab_size, ff = s.ffn_dim;
  // Scales: unit-variance embeddings; each of the 2L residual updates adds
  // about 0.5/sqrt(2L) per element, so the layers together move the hidden
  // state noticeably but do not drown the token's own embedding.
  const float upd = o.residual_gain * 0.5f / std::sqrt(2.0f * s.n_layers);
  bool quantized = false;
  auto mat = [&](const std::string& name, int64_t ne0, int64_t ne1, float stddev) {
    return AddMatrix(w, o, &quantized, name, ne0, ne1, stddev);
  };
  SPECD_RETURN_IF_ERROR(mat("token_embd.weight", d, V, 1.0f));
  for (int l = 0; l < s.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    SPECD_RETURN_IF_ERROR(AddVector(w, o, b + "attn_norm.weight", d, 1.0f, 0.1f));
    SPECD_RETURN_IF_ERROR(mat(b + "attn_q.weight", d, q, 2.0f / std::sqrt(static_cast<float>(d))));
    SPECD_RETURN_IF_ERROR(mat(b + "attn_k.weight", d, kv, 2.0f / std::sqrt(static_cast<float>(d))));
    SPECD_RETURN_IF_ERROR(mat(b + "attn_v.weight", d, kv, 1.0f / std::sqrt(static_cast<float>(d))));
    SPECD_RETURN_IF_ERROR(mat(b + "attn_output.weight", q, d, upd / std::sqrt(static_cast<float>(q))));
    if (s.arch == "qwen2") {
      SPECD_RETURN_IF_ERROR(AddVector(w, o, b + "attn_q.bias", q, 0.0f, 0.1f));
      SPECD_RETURN_IF_ERROR(AddVector(w, o, b + "attn_k.bias", kv, 0.0f, 0.1f));
      SPECD_RETURN_IF_ERROR(AddVector(w, o, b + "attn_v.bias", kv, 0.0f, 0.1f));
    }
    if (s.arch == "qwen3") {
      SPECD_RETURN_IF_ERROR(AddVector(w, o, b + "attn_q_norm.weight", hd, 1.0f, 0.1f));
      SPECD_RETURN_IF_ERROR(AddVector(w, o, b + "attn_k_norm.weight", hd, 1.0f, 0.1f));
    }
    SPECD_RETURN_IF_ERROR(AddVector(w, o, b + "ffn_norm.weight", d, 1.0f, 0.1f));
    SPECD_RETURN_IF_ERROR(mat(b + "ffn_gate.weight", d, ff, 1.0f / std::sqrt(static_cast<float>(d))));
    SPECD_RETURN_IF_ERROR(mat(b + "ffn_up.weight", d, ff, 1.0f / std::sqrt(static_cast<float>(d))));
    SPECD_RETURN_IF_ERROR(mat(b + "ffn_down.weight", ff, d, 1.6f * upd / std::sqrt(static_cast<float>(ff))));
  }
  SPECD_RETURN_IF_ERROR(AddVector(w, o, "output_norm.weight", d, 1.0f, 0.1f));
  if (!s.tied_output) {
    // Logit spread of a few units: distributions peaked enough to be
    // predictable, flat enough that sampling matters.
    SPECD_RETURN_IF_ERROR(mat("output.weight", d, V, 3.0f / std::sqrt(static_cast<float>(d))));
  }
  if (quantized) w.Set(kQuantVersionKey, GgufValue::U32(kGgmlQuantVersion));
  return w.WriteFile(path, o.sync);
}

absl::Status DeriveDraft(const std::string& target_path, const DeriveOptions& o, const std::string& out_path) {
  SPECD_ASSIGN_OR_RETURN(auto f, GgufFile::Open(target_path));
  SPECD_ASSIGN_OR_RETURN(std::string arch, f->GetString("general.architecture"));
  SPECD_ASSIGN_OR_RETURN(uint64_t n_layers, f->GetUInt(arch + ".block_count"));
  if (o.layers < 0 || o.layers > static_cast<int>(n_layers))
    return absl::InvalidArgumentError(absl::StrCat("cannot keep ", o.layers, " of ", n_layers, " layers"));
  const int keep = o.layers == 0 ? static_cast<int>(n_layers) : o.layers;
  GgufWriter w;
  for (const auto& [key, val] : f->metadata()) {
    if (key == "general.alignment" || key == kQuantVersionKey) continue;  // set below, from what is written
    w.Set(key, val);
  }
  w.Set(arch + ".block_count", GgufValue::U32(keep));
  w.Set("general.name", GgufValue::Str(o.name.empty() ? "specd-derived-draft" : o.name));
  if (!o.weight_type.empty()) {
    SPECD_RETURN_IF_ERROR(SetFileType(w, o.weight_type));
  } else if (f->Has(kFileTypeKey)) {
    // Kept, as llama.cpp's u32 even when an older specd wrote the target.
    SPECD_ASSIGN_OR_RETURN(const FileTypeInfo ft, FileTypeOf(*f));
    w.Set(kFileTypeKey, GgufValue::U32(ft.ftype));
  }
  bool quantized = false;
  for (const auto& t : f->tensors()) {
    const int layer = LayerOf(t.name);
    if (layer >= keep) continue;
    GgmlType nt = t.type;
    if (!o.weight_type.empty() && t.ne.size() >= 2) {
      SPECD_ASSIGN_OR_RETURN(nt, MixTypeFor(o.weight_type, t.name, layer, keep));
      if (t.ne[0] % TypeTraits(nt).block_size != 0) nt = t.type;
    }
    quantized |= IsQuantized(nt);
    const uint8_t* src = t.data;
    const GgmlType st = t.type;
    const int64_t ne0 = t.ne[0], rows = t.rows();
    if (nt == st) {  // a copy: the same weights, not a re-rounding of them
      const size_t n = t.nbytes;
      SPECD_RETURN_IF_ERROR(w.AddTensorLazy(t.name, nt, t.ne, [src, n](uint8_t* dst) {
        Pool().ParallelFor(
            static_cast<int64_t>(n), [&](int64_t a, int64_t b) { std::memcpy(dst + a, src + a, b - a); },
            /*grain=*/int64_t{1} << 20);
        return absl::OkStatus();
      }));
      continue;
    }
    SPECD_RETURN_IF_ERROR(w.AddTensorLazy(t.name, nt, t.ne, [=](uint8_t* dst) {
      const size_t src_rb = RowBytes(st, ne0);
      return QuantizeRows(nt, ne0, rows, dst,
                          [&](int64_t r, float* row) { DequantizeRow(st, src + r * src_rb, row, ne0); });
    }));
  }
  if (quantized) w.Set(kQuantVersionKey, GgufValue::U32(kGgmlQuantVersion));
  return w.WriteFile(out_path, o.sync);
}

absl::StatusOr<WeightFill> ParseWeightFill(const std::string& name) {
  if (name == "gaussian") return WeightFill::kGaussian;
  if (name == "blocks") return WeightFill::kBlocks;
  return absl::InvalidArgumentError(absl::StrCat("unknown weight fill '", name, "' (gaussian, blocks)"));
}

const char* WeightFillName(WeightFill f) { return f == WeightFill::kBlocks ? "blocks" : "gaussian"; }

}  // namespace specd
