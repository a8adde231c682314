#include "common/model/model.h"

#include <cmath>
#include <map>
#include <sstream>

#include "common/util/log.h"

namespace specd {

const char* ArchName(Arch a) {
  switch (a) {
    case Arch::kLlama: return "llama";
    case Arch::kQwen2: return "qwen2";
    case Arch::kQwen3: return "qwen3";
  }
  return "?";
}

absl::StatusOr<ModelConfig> ModelConfig::FromGguf(const GgufFile& f) {
  ModelConfig c;
  SPECD_ASSIGN_OR_RETURN(std::string arch, f.GetString("general.architecture"));
  if (arch == "llama") c.arch = Arch::kLlama;
  else if (arch == "qwen2") c.arch = Arch::kQwen2;
  else if (arch == "qwen3") c.arch = Arch::kQwen3;
  else
    return absl::UnimplementedError(absl::StrCat(f.path(), ": architecture '", arch,
                                                 "' is not supported (supported: llama, qwen2, qwen3)"));
  SPECD_ASSIGN_OR_RETURN(c.name, f.GetStringOr("general.name", ""));
  const std::string p = arch + ".";
  auto get_int = [&](const std::string& key, int* out, int64_t lo, int64_t hi) -> absl::Status {
    SPECD_ASSIGN_OR_RETURN(uint64_t v, f.GetUInt(p + key));
    if (v < static_cast<uint64_t>(lo) || v > static_cast<uint64_t>(hi))
      return absl::InvalidArgumentError(
          absl::StrCat(f.path(), ": ", p, key, " = ", v, " is out of range [", lo, ", ", hi, "]"));
    *out = static_cast<int>(v);
    return absl::OkStatus();
  };
  SPECD_RETURN_IF_ERROR(get_int("block_count", &c.n_layers, 1, 1024));
  SPECD_RETURN_IF_ERROR(get_int("embedding_length", &c.d_model, 1, 1 << 17));
  SPECD_RETURN_IF_ERROR(get_int("feed_forward_length", &c.ffn_dim, 1, 1 << 19));
  SPECD_RETURN_IF_ERROR(get_int("attention.head_count", &c.n_heads, 1, 4096));
  if (f.Has(p + "attention.head_count_kv")) {
    SPECD_RETURN_IF_ERROR(get_int("attention.head_count_kv", &c.n_kv_heads, 1, 4096));
  } else {
    c.n_kv_heads = c.n_heads;
  }
  if (c.n_heads % c.n_kv_heads != 0)
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": head_count ", c.n_heads,
                                                   " is not a multiple of head_count_kv ", c.n_kv_heads));
  if (f.Has(p + "attention.key_length")) {
    SPECD_RETURN_IF_ERROR(get_int("attention.key_length", &c.head_dim, 1, 1024));
    int vlen = c.head_dim;
    if (f.Has(p + "attention.value_length")) SPECD_RETURN_IF_ERROR(get_int("attention.value_length", &vlen, 1, 1024));
    if (vlen != c.head_dim)
      return absl::UnimplementedError(absl::StrCat(f.path(), ": key_length ", c.head_dim, " != value_length ", vlen));
  } else {
    if (c.d_model % c.n_heads != 0)
      return absl::InvalidArgumentError(absl::StrCat(f.path(), ": embedding_length ", c.d_model,
                                                     " is not a multiple of head_count ", c.n_heads));
    c.head_dim = c.d_model / c.n_heads;
  }
  if (c.head_dim % 2 != 0)
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": head dimension ", c.head_dim, " is odd"));
  SPECD_ASSIGN_OR_RETURN(uint64_t ctx, f.GetUIntOr(p + "context_length", 4096));
  c.ctx_train = static_cast<int>(std::min<uint64_t>(ctx, 1u << 24));
  SPECD_ASSIGN_OR_RETURN(double eps, f.GetFloatOr(p + "attention.layer_norm_rms_epsilon", 1e-5));
  if (!(eps > 0 && eps < 1))
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": rms epsilon ", eps, " is out of range"));
  c.rms_eps = static_cast<float>(eps);

  c.rope.style = c.arch == Arch::kLlama ? RopeStyle::kNormal : RopeStyle::kNeox;
  SPECD_ASSIGN_OR_RETURN(double base, f.GetFloatOr(p + "rope.freq_base", 10000.0));
  if (!(base > 1)) return absl::InvalidArgumentError(absl::StrCat(f.path(), ": rope.freq_base ", base, " must be > 1"));
  c.rope.freq_base = static_cast<float>(base);
  c.rope.n_dims = c.head_dim;
  if (f.Has(p + "rope.dimension_count")) SPECD_RETURN_IF_ERROR(get_int("rope.dimension_count", &c.rope.n_dims, 2, c.head_dim));
  if (c.rope.n_dims % 2 != 0)
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": rope.dimension_count must be even"));
  SPECD_ASSIGN_OR_RETURN(std::string scaling, f.GetStringOr(p + "rope.scaling.type", "none"));
  SPECD_ASSIGN_OR_RETURN(double factor, f.GetFloatOr(p + "rope.scaling.factor", 0.0));
  if (!f.Has(p + "rope.scaling.factor")) {
    // Older files carry only the linear scale.
    SPECD_ASSIGN_OR_RETURN(factor, f.GetFloatOr(p + "rope.scale_linear", 0.0));
    if (factor > 0 && scaling == "none") scaling = "linear";
  }
  if (scaling == "linear") {
    if (!(factor > 0)) return absl::InvalidArgumentError(absl::StrCat(f.path(), ": linear rope scaling needs a factor > 0"));
    c.rope.freq_scale = static_cast<float>(1.0 / factor);
  } else if (scaling != "none" && !(scaling == "yarn" && factor <= 1.0)) {
    return absl::UnimplementedError(absl::StrCat(f.path(), ": rope scaling '", scaling, "' is not supported (none, linear)"));
  }
  c.qkv_bias = c.arch == Arch::kQwen2;
  c.qk_norm = c.arch == Arch::kQwen3;

  const GgufTensorInfo* emb = f.FindTensor("token_embd.weight");
  if (!emb) return absl::InvalidArgumentError(absl::StrCat(f.path(), ": missing tensor token_embd.weight"));
  if (emb->ne.size() != 2)
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": token_embd.weight must be 2-D"));
  c.vocab_size = static_cast<int>(emb->ne[1]);
  c.tied_output = f.FindTensor("output.weight") == nullptr;
  return c;
}

std::string ModelConfig::Describe() const {
  std::ostringstream os;
  os << ArchName(arch) << " layers=" << n_layers << " d=" << d_model << " heads=" << n_heads << "/" << n_kv_heads
     << " head_dim=" << head_dim << " ffn=" << ffn_dim << " vocab=" << vocab_size << " ctx=" << ctx_train
     << " rope=" << (rope.style == RopeStyle::kNeox ? "neox" : "normal") << "/" << rope.freq_base
     << (tied_output ? " tied-output" : "");
  return os.str();
}

absl::Status Model::LoadWeights(const SourceFor& source, const std::string& origin) {
  const ModelConfig& c = cfg_;
  auto load = [&](const Expect& e, Weight* out) -> absl::Status {
    SPECD_ASSIGN_OR_RETURN(std::optional<WeightSource> src, source(e));
    if (!src) {
      if (e.required) return absl::InvalidArgumentError(absl::StrCat(origin, ": missing tensor ", e.name));
      return absl::OkStatus();
    }
    const auto& tr = TypeTraits(src->type);
    if (!tr.computable)
      return absl::UnimplementedError(absl::StrCat(origin, ": tensor ", e.name, " has type ", tr.name,
                                                   ", which specd cannot compute with (supported: F32 F16 BF16 "
                                                   "Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K)"));
    if (e.f32_only && src->type != GgmlType::F32)
      return absl::UnimplementedError(absl::StrCat(origin, ": tensor ", e.name, " must be F32, is ", tr.name));
    SPECD_ASSIGN_OR_RETURN(*out, backend_->LoadWeight(*src));
    return absl::OkStatus();
  };
  const int64_t d = c.d_model, q = c.q_dim(), kv = c.kv_dim(), ff = c.ffn_dim, V = c.vocab_size, hd = c.head_dim;
  SPECD_RETURN_IF_ERROR(load({"token_embd.weight", {d, V}}, &w_.tok_embd));
  SPECD_RETURN_IF_ERROR(load({"output_norm.weight", {d}, true, true}, &w_.output_norm));
  if (c.tied_output) {
    w_.output = w_.tok_embd;
  } else {
    SPECD_RETURN_IF_ERROR(load({"output.weight", {d, V}}, &w_.output));
  }
  w_.layers.resize(c.n_layers);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    LayerWeights& L = w_.layers[l];
    SPECD_RETURN_IF_ERROR(load({b + "attn_norm.weight", {d}, true, true}, &L.attn_norm));
    SPECD_RETURN_IF_ERROR(load({b + "attn_q.weight", {d, q}}, &L.wq));
    SPECD_RETURN_IF_ERROR(load({b + "attn_k.weight", {d, kv}}, &L.wk));
    SPECD_RETURN_IF_ERROR(load({b + "attn_v.weight", {d, kv}}, &L.wv));
    SPECD_RETURN_IF_ERROR(load({b + "attn_output.weight", {q, d}}, &L.wo));
    SPECD_RETURN_IF_ERROR(load({b + "attn_q.bias", {q}, c.qkv_bias, true}, &L.bq));
    SPECD_RETURN_IF_ERROR(load({b + "attn_k.bias", {kv}, c.qkv_bias, true}, &L.bk));
    SPECD_RETURN_IF_ERROR(load({b + "attn_v.bias", {kv}, c.qkv_bias, true}, &L.bv));
    if (c.qk_norm) {
      SPECD_RETURN_IF_ERROR(load({b + "attn_q_norm.weight", {hd}, true, true}, &L.q_norm));
      SPECD_RETURN_IF_ERROR(load({b + "attn_k_norm.weight", {hd}, true, true}, &L.k_norm));
    }
    SPECD_RETURN_IF_ERROR(load({b + "ffn_norm.weight", {d}, true, true}, &L.ffn_norm));
    SPECD_RETURN_IF_ERROR(load({b + "ffn_gate.weight", {d, ff}}, &L.w_gate));
    SPECD_RETURN_IF_ERROR(load({b + "ffn_up.weight", {d, ff}}, &L.w_up));
    SPECD_RETURN_IF_ERROR(load({b + "ffn_down.weight", {ff, d}}, &L.w_down));
  }
  return absl::OkStatus();
}

namespace {
std::string Dims(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}
}  // namespace

size_t Model::ActivationFloats(const ModelConfig& c, int n, int n_out) {
  const size_t N = static_cast<size_t>(n);
  return N * c.d_model * 3                              // x, xn, tmp
         + N * c.q_dim() * 2 + N * c.kv_dim() * 2       // q, attn, k, v
         + N * c.ffn_dim * 2                            // gate, up
         + static_cast<size_t>(n_out) * c.d_model      // out_x
         + static_cast<size_t>(n_out) * c.vocab_size;  // logits
}

WeightStats Model::ComputeWeightStats(const GgufFile& file) {
  WeightStats s;
  std::map<GgmlType, size_t> by;
  for (const auto& t : file.tensors()) {
    s.total_bytes += t.nbytes;
    s.n_params += t.nelements();
    by[t.type] += t.nbytes;
  }
  s.bytes_by_type.assign(by.begin(), by.end());
  return s;
}

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const GgufFile& file, Backend* backend, int max_batch_tokens,
                                                   int max_out_rows, const ResidentWeights* resident) {
  if (max_batch_tokens < 1 || max_out_rows < 1 || max_out_rows > max_batch_tokens)
    return absl::InvalidArgumentError("Model::Load: need 1 <= max_out_rows <= max_batch_tokens");
  std::unique_ptr<Model> m(new Model());
  m->backend_ = backend;
  m->max_batch_tokens_ = max_batch_tokens;
  m->max_out_rows_ = max_out_rows;
  SPECD_ASSIGN_OR_RETURN(m->cfg_, ModelConfig::FromGguf(file));
  m->stats_ = ComputeWeightStats(file);
  const std::string cfg_desc = m->cfg_.Describe();
  auto from_file = [&](const Expect& e) -> absl::StatusOr<std::optional<WeightSource>> {
    const GgufTensorInfo* t = file.FindTensor(e.name);
    if (!t) return std::optional<WeightSource>();
    std::vector<int64_t> ne = t->ne;
    while (ne.size() > e.ne.size() && ne.back() == 1) ne.pop_back();
    if (ne != e.ne)
      return absl::InvalidArgumentError(absl::StrCat(file.path(), ": tensor ", e.name, " has shape ", Dims(t->ne),
                                                     ", expected ", Dims(e.ne), " for ", cfg_desc));
    WeightSource src{e.name, t->type, ne[0], ne.size() > 1 ? ne[1] : 1, t->data, t->nbytes};
    if (resident) {
      if (auto it = resident->find(e.name); it != resident->end()) src.resident = it->second;
    }
    return std::optional<WeightSource>(src);
  };
  SPECD_RETURN_IF_ERROR(m->LoadWeights(from_file, file.path()));
  SPECD_RETURN_IF_ERROR(m->AllocateActivations());
  return m;
}

absl::StatusOr<std::unique_ptr<Model>> Model::CreateSynthetic(const ModelConfig& cfg, const TypeFor& type_for,
                                                              Backend* backend, int max_batch_tokens,
                                                              int max_out_rows) {
  if (max_batch_tokens < 1 || max_out_rows < 1 || max_out_rows > max_batch_tokens)
    return absl::InvalidArgumentError("Model::CreateSynthetic: need 1 <= max_out_rows <= max_batch_tokens");
  std::unique_ptr<Model> m(new Model());
  m->backend_ = backend;
  m->max_batch_tokens_ = max_batch_tokens;
  m->max_out_rows_ = max_out_rows;
  m->cfg_ = cfg;
  std::map<GgmlType, size_t> by;
  auto synth = [&](const Expect& e) -> absl::StatusOr<std::optional<WeightSource>> {
    if (!e.required) return std::optional<WeightSource>();
    const int layer = e.name.rfind("blk.", 0) == 0 ? std::atoi(e.name.c_str() + 4) : -1;
    GgmlType t = e.ne.size() == 1 ? GgmlType::F32 : type_for(e.name, layer);
    if (e.ne[0] % TypeTraits(t).block_size != 0) t = GgmlType::F16;
    const int64_t rows = e.ne.size() > 1 ? e.ne[1] : 1;
    const size_t nbytes = RowBytes(t, e.ne[0]) * rows;
    m->stats_.total_bytes += nbytes;
    m->stats_.n_params += e.ne[0] * rows;
    by[t] += nbytes;
    return std::optional<WeightSource>(WeightSource{e.name, t, e.ne[0], rows, nullptr, nbytes});
  };
  SPECD_RETURN_IF_ERROR(m->LoadWeights(synth, "synthetic " + cfg.Describe()));
  m->stats_.bytes_by_type.assign(by.begin(), by.end());
  SPECD_RETURN_IF_ERROR(m->AllocateActivations());
  return m;
}

void Model::ForEachWeight(const std::function<void(const Weight&)>& fn) const {
  auto visit = [&](const Weight& w) {
    if (w.present()) fn(w);
  };
  visit(w_.tok_embd);
  visit(w_.output_norm);
  if (!cfg_.tied_output) visit(w_.output);
  for (const LayerWeights& L : w_.layers) {
    for (const Weight* w : {&L.attn_norm, &L.wq, &L.wk, &L.wv, &L.wo, &L.bq, &L.bk, &L.bv, &L.q_norm, &L.k_norm,
                            &L.ffn_norm, &L.w_gate, &L.w_up, &L.w_down})
      visit(*w);
  }
}

absl::Status Model::AllocateActivations() {
  const ModelConfig& c = cfg_;
  SPECD_ASSIGN_OR_RETURN(float* act, backend_->AllocActivations(ActivationFloats(c, max_batch_tokens_, max_out_rows_)));
  const size_t N = static_cast<size_t>(max_batch_tokens_);
  auto take = [&](size_t n) {
    float* p = act;
    act += n;
    return p;
  };
  x_ = take(N * c.d_model);
  xn_ = take(N * c.d_model);
  tmp_ = take(N * c.d_model);
  q_ = take(N * c.q_dim());
  attn_ = take(N * c.q_dim());
  k_ = take(N * c.kv_dim());
  v_ = take(N * c.kv_dim());
  gate_ = take(N * c.ffn_dim);
  up_ = take(N * c.ffn_dim);
  out_x_ = take(static_cast<size_t>(max_out_rows_) * c.d_model);
  logits_ = take(static_cast<size_t>(max_out_rows_) * c.vocab_size);
  return absl::OkStatus();
}

absl::StatusOr<const float*> Model::Forward(const Batch& b) {
  const int n = b.n_tokens();
  if (n < 1 || n > max_batch_tokens_)
    return absl::InvalidArgumentError(absl::StrCat("batch of ", n, " tokens (limit ", max_batch_tokens_, ")"));
  if (b.n_out() > max_out_rows_)
    return absl::InvalidArgumentError(absl::StrCat("batch wants ", b.n_out(), " logits rows (limit ", max_out_rows_, ")"));
  for (int t = 0; t < n; ++t) {
    if (b.tokens[t] < 0 || b.tokens[t] >= cfg_.vocab_size)
      return absl::InvalidArgumentError(absl::StrCat("token id ", b.tokens[t], " out of range [0, ", cfg_.vocab_size, ")"));
  }
  const ModelConfig& c = cfg_;
  Backend& be = *backend_;
  SPECD_RETURN_IF_ERROR(be.SetBatch(b));
  const AttentionParams ap{0, c.n_heads, c.n_kv_heads, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim))};

  be.Embed(w_.tok_embd, x_);
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w_.layers[l];
    // Attention block. The previous layer's FFN output (tmp_) joins the residual here.
    if (l == 0) be.RmsNorm(x_, L.attn_norm, c.rms_eps, n, xn_);
    else be.AddRmsNorm(x_, tmp_, L.attn_norm, c.rms_eps, n, xn_);
    be.MatMul(L.wq, L.bq.present() ? &L.bq : nullptr, xn_, n, q_);
    be.MatMul(L.wk, L.bk.present() ? &L.bk : nullptr, xn_, n, k_);
    be.MatMul(L.wv, L.bv.present() ? &L.bv : nullptr, xn_, n, v_);
    if (c.qk_norm) {
      be.RmsNorm(q_, L.q_norm, c.rms_eps, n * c.n_heads, q_);
      be.RmsNorm(k_, L.k_norm, c.rms_eps, n * c.n_kv_heads, k_);
    }
    be.Rope(q_, c.n_heads, c.head_dim, c.rope);
    be.Rope(k_, c.n_kv_heads, c.head_dim, c.rope);
    AttentionParams p = ap;
    p.layer = l;
    be.Attention(q_, k_, v_, p, attn_);
    be.MatMul(L.wo, nullptr, attn_, n, tmp_);
    // FFN block.
    be.AddRmsNorm(x_, tmp_, L.ffn_norm, c.rms_eps, n, xn_);
    be.MatMul(L.w_gate, nullptr, xn_, n, gate_);
    be.MatMul(L.w_up, nullptr, xn_, n, up_);
    be.SwiGLU(gate_, up_, n, c.ffn_dim, gate_);
    be.MatMul(L.w_down, nullptr, gate_, n, tmp_);
  }
  be.Add(x_, tmp_, static_cast<int64_t>(n) * c.d_model);
  if (b.n_out() == 0) return logits_;
  be.GatherOutRows(x_, c.d_model, out_x_);
  be.RmsNorm(out_x_, w_.output_norm, c.rms_eps, b.n_out(), out_x_);
  be.MatMul(w_.output, nullptr, out_x_, b.n_out(), logits_);
  return logits_;
}

}  // namespace specd
