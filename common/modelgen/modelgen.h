// Generated models: GGUF target/draft pairs of any shape with a real
// tokenizer vocabulary, deterministic by seed. Tests, benchmarks and the demo
// use them; nothing is downloaded.
//
// Weights are random but structured so that generation is not degenerate:
// each layer adds a modest residual update, so a draft derived from the target
// (fewer layers, or a coarser quantization of the same weights) predicts the
// target's next token often but not always: speculative acceptance is real
// and below 100%.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/gguf/ggml_types.h"
#include "common/model/model.h"
#include "common/util/status.h"

namespace specd {

struct ModelShape {
  std::string arch = "llama";  // llama | qwen2 | qwen3
  int n_layers = 2;
  int d_model = 64;
  int n_heads = 4;
  int n_kv_heads = 2;
  int head_dim = 0;            // 0: d_model / n_heads
  int ffn_dim = 128;
  int vocab_size = 512;        // tokens in the generated vocabulary
  int ctx = 2048;
  float rope_base = 10000.0f;
  bool tied_output = false;

  int HeadDim() const { return head_dim > 0 ? head_dim : d_model / n_heads; }
  int64_t ParamCount() const;
  absl::Status Validate() const;
  std::string Describe() const;
};

// The hyper-parameters a file generated with this shape would carry.
ModelConfig ToModelConfig(const ModelShape& s);

// Named shapes: tiny test shapes and the real ones (see PresetNames()).
absl::StatusOr<ModelShape> PresetShape(const std::string& name);
std::vector<std::string> PresetNames();

// How GenerateModel makes weight matrices.
enum class WeightFill {
  // Gaussian floats (a counter-based sample, any element computable on its
  // own) quantized by ggml's reference quantizers: tests compare dequantized
  // values against the sample. Costs ~100 ns per weight.
  kGaussian,
  // Random valid quantized blocks written directly (common/quant/
  // block_random.h, as the benchmarks synthesize weights on the device):
  // uniform codes with finite scales set for the same deviation, ~2 ns per
  // weight. For models whose values do not matter (speed runs).
  kBlocks,
};
absl::StatusOr<WeightFill> ParseWeightFill(const std::string& name);  // "gaussian" | "blocks"
const char* WeightFillName(WeightFill f);

struct GenOptions {
  ModelShape shape;
  // A single type (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K) or a
  // llama.cpp-style mix: Q4_K_M, Q4_K_S, Q5_K_M.
  std::string weight_type = "F32";
  std::string vocab = "gpt2";  // gpt2 (byte-level BPE) | llama (SentencePiece BPE)
  uint64_t seed = 1;
  std::string name;            // general.name
  // Scales every layer's contribution to the residual: 0.35 gives a half-depth
  // derived draft about 70% greedy agreement with its target.
  float residual_gain = 0.35f;
  WeightFill fill = WeightFill::kGaussian;
  bool sync = true;  // fsync before the rename (GgufWriter::WriteFile)
  // > 0: the output head also maps each token's embedding to a successor
  // token (a permutation of the vocabulary drawn from successor_seed) with a
  // logit of about this many units, over the head's random logits (deviation
  // ~3). Models made with the same vocabulary and successor seed, of any
  // shapes, then predict the same next token often (more often with a higher
  // gain or a lower residual_gain): how an independent small draft (a
  // 0.6B-class shape for a 27B-class target) agrees with its target without
  // training. The embedding and the head are Gaussian even with kBlocks, and
  // the head is untied.
  float successor_gain = 0.0f;
  uint64_t successor_seed = 1;
};

// The successor permutation GenOptions::successor_seed draws: x -> (a x + b) mod V.
struct SuccessorMap {
  SuccessorMap(uint64_t seed, int64_t vocab);
  int64_t Next(int64_t x) const;
  int64_t Prev(int64_t y) const;

 private:
  int64_t v_, a_, a_inv_, b_;
};

// Writes a model to `path` (atomically), one tensor at a time, each produced
// in parallel straight into the file (GgufWriter::AddTensorLazy).
absl::Status GenerateModel(const GenOptions& opts, const std::string& path);

// A draft derived from a target file: keeps `layers` of its layers (0: all;
// the first layers are kept, the rest dropped) and/or requantizes matrices to
// `weight_type` (empty: keep). The vocabulary is the target's, so the pair is
// compatible by construction. Every tensor whose type stays (the embedding,
// the output head, norms; with no `weight_type`, all) keeps the target's
// bytes, so a draft worker maps it from the target instead of a second copy.
struct DeriveOptions {
  int layers = 0;
  std::string weight_type;
  std::string name;
  bool sync = true;
};
absl::Status DeriveDraft(const std::string& target_path, const DeriveOptions& opts, const std::string& out_path);

// The type a mix assigns to one tensor (exposed for `specd bench` and tests).
absl::StatusOr<GgmlType> MixTypeFor(const std::string& mix, const std::string& tensor_name, int layer,
                                    int n_layers);

}  // namespace specd
