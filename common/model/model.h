// The transformer graph for the llama, qwen2 and qwen3 architectures, written
// once against the Backend interface (common/backend/backend.h) so the CPU and
// CUDA backends execute the very same sequence of operations.
#pragma once
#include <functional>
#include <memory>
#include <unordered_map>
#include <optional>
#include <string>
#include <vector>

#include "common/backend/backend.h"
#include "common/gguf/gguf.h"
#include "common/util/status.h"

namespace specd {

enum class Arch { kLlama, kQwen2, kQwen3 };
const char* ArchName(Arch a);

// Hyper-parameters read from GGUF metadata ("<arch>.*" keys).
struct ModelConfig {
  Arch arch = Arch::kLlama;
  std::string name;
  int n_layers = 0;
  int d_model = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int ffn_dim = 0;
  int vocab_size = 0;
  int ctx_train = 0;
  float rms_eps = 1e-5f;
  RopeParams rope;
  bool qkv_bias = false;    // qwen2
  bool qk_norm = false;     // qwen3
  bool tied_output = false; // output head shares token_embd

  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  // Reads and validates the hyper-parameters; errors name the file and key.
  static absl::StatusOr<ModelConfig> FromGguf(const GgufFile& f);
  std::string Describe() const;
};

struct LayerWeights {
  Weight attn_norm, wq, wk, wv, wo, bq, bk, bv, q_norm, k_norm;
  Weight ffn_norm, w_gate, w_up, w_down;
};

struct ModelWeights {
  Weight tok_embd, output_norm, output;
  std::vector<LayerWeights> layers;
};

// Bytes of weights by tensor type, and totals, for ledgers and `specd inspect`.
struct WeightStats {
  size_t total_bytes = 0;
  int64_t n_params = 0;
  std::vector<std::pair<GgmlType, size_t>> bytes_by_type;
};

// Tensors already resident on the backend's device, by name: another
// process's copy of the very bytes this file holds (the caller checked,
// common/memory/weight_manifest.h). Load wraps them instead of loading them.
using ResidentWeights = std::unordered_map<std::string, const void*>;

class Model {
 public:
  // Validates tensor names, shapes and types against the config, then makes
  // every weight resident in the backend (those in `resident` are wrapped,
  // not loaded). `max_batch_tokens` sizes the activation buffers (the largest
  // batch Forward will be given). `max_out_rows` bounds how many logits rows
  // one Forward returns.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const GgufFile& file, Backend* backend,
                                                     int max_batch_tokens, int max_out_rows,
                                                     const ResidentWeights* resident = nullptr);
  // A model with weights the backend synthesizes in place (random valid
  // blocks; WeightSource::host_data == nullptr), for benchmarks of shapes
  // whose files would not fit: `type_for` gives each matrix's type by name.
  using TypeFor = std::function<GgmlType(const std::string& name, int layer)>;
  static absl::StatusOr<std::unique_ptr<Model>> CreateSynthetic(const ModelConfig& cfg, const TypeFor& type_for,
                                                                Backend* backend, int max_batch_tokens,
                                                                int max_out_rows);

  const ModelConfig& config() const { return cfg_; }
  Backend* backend() const { return backend_; }
  int max_batch_tokens() const { return max_batch_tokens_; }
  int max_out_rows() const { return max_out_rows_; }
  const WeightStats& weight_stats() const { return stats_; }
  // Every distinct weight (a tied output head is visited once, as token_embd).
  void ForEachWeight(const std::function<void(const Weight&)>& fn) const;

  // Runs one forward pass. Returns a backend address of n_out x vocab logits
  // (valid until the next Forward). The KV pool must hold the batch's blocks.
  absl::StatusOr<const float*> Forward(const Batch& batch);

  // Activation floats needed for a batch of n tokens (for the memory plan).
  static size_t ActivationFloats(const ModelConfig& cfg, int n_tokens, int n_out_rows);
  static WeightStats ComputeWeightStats(const GgufFile& file);

 private:
  Model() = default;
  // Finds the source of one expected tensor; nullopt when absent.
  struct Expect {
    std::string name;
    std::vector<int64_t> ne;
    bool required = true;
    bool f32_only = false;  // norms and biases
  };
  using SourceFor = std::function<absl::StatusOr<std::optional<WeightSource>>(const Expect&)>;
  absl::Status LoadWeights(const SourceFor& source, const std::string& origin);
  absl::Status AllocateActivations();

  ModelConfig cfg_;
  ModelWeights w_;
  WeightStats stats_;
  Backend* backend_ = nullptr;
  int max_batch_tokens_ = 0;
  int max_out_rows_ = 0;
  // Activation buffers (backend addresses).
  float *x_ = nullptr, *xn_ = nullptr, *q_ = nullptr, *k_ = nullptr, *v_ = nullptr, *attn_ = nullptr,
        *gate_ = nullptr, *up_ = nullptr, *tmp_ = nullptr, *out_x_ = nullptr, *logits_ = nullptr;
};

}  // namespace specd
