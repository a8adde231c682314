#include "cli/preset_engine.h"

#include "common/modelgen/modelgen.h"

namespace specd::cli {
namespace {
absl::StatusOr<std::pair<ModelShape, Model::TypeFor>> Resolve(const std::string& preset, const std::string& mix) {
  SPECD_ASSIGN_OR_RETURN(ModelShape shape, PresetShape(preset));
  SPECD_RETURN_IF_ERROR(MixTypeFor(mix, "blk.0.attn_q.weight", 0, shape.n_layers).status());
  const int n_layers = shape.n_layers;
  Model::TypeFor type_for = [mix, n_layers](const std::string& name, int layer) {
    return *MixTypeFor(mix, name, layer, n_layers);
  };
  return std::make_pair(shape, type_for);
}
}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> CreatePresetEngine(const std::string& preset, const std::string& mix,
                                                           const EngineOptions& opts) {
  SPECD_ASSIGN_OR_RETURN(auto r, Resolve(preset, mix));
  return Engine::CreateSynthetic(ToModelConfig(r.first), r.second, opts);
}

absl::StatusOr<MemoryLedger> PlanPreset(const std::string& preset, const std::string& mix, const EngineOptions& opts,
                                        int64_t device_free) {
  SPECD_ASSIGN_OR_RETURN(auto r, Resolve(preset, mix));
  const ModelConfig cfg = ToModelConfig(r.first);
  // Weight bytes by the same rules Model::CreateSynthetic applies.
  size_t weights = 0;
  const int64_t d = cfg.d_model, q = cfg.q_dim(), kv = cfg.kv_dim(), ff = cfg.ffn_dim, V = cfg.vocab_size;
  auto mat = [&](const std::string& name, int layer, int64_t ne0, int64_t ne1) {
    GgmlType t = r.second(name, layer);
    if (ne0 % TypeTraits(t).block_size != 0) t = GgmlType::F16;
    weights += RowBytes(t, ne0) * static_cast<size_t>(ne1);
  };
  mat("token_embd.weight", -1, d, V);
  if (!cfg.tied_output) mat("output.weight", -1, d, V);
  weights += static_cast<size_t>(d) * 4;
  for (int l = 0; l < cfg.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    mat(b + "attn_q.weight", l, d, q);
    mat(b + "attn_k.weight", l, d, kv);
    mat(b + "attn_v.weight", l, d, kv);
    mat(b + "attn_output.weight", l, q, d);
    mat(b + "ffn_gate.weight", l, d, ff);
    mat(b + "ffn_up.weight", l, d, ff);
    mat(b + "ffn_down.weight", l, ff, d);
    weights += static_cast<size_t>(2 * d) * 4;
    if (cfg.qkv_bias) weights += static_cast<size_t>(q + 2 * kv) * 4;
    if (cfg.qk_norm) weights += static_cast<size_t>(2 * cfg.head_dim) * 4;
  }
  return Engine::PlanFor(cfg, weights, opts, device_free);
}

}  // namespace specd::cli
