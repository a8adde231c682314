// The backend interface: the operations the model graph (common/model) is
// written in. The CPU backend runs them on host threads; the CUDA backend
// enqueues kernels on one stream. Pointers to activations (`float*`) are
// backend addresses: host memory for the CPU backend, device memory for CUDA.
// The graph never dereferences them.
//
// Batches are ragged: tokens from several sequences, each token with its own
// position; attention is causal within each sequence. Prefill, single-token
// decode, the k+1-token verify and continuous batching are all the same call.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/gguf/ggml_types.h"
#include "common/sampler/sampler.h"
#include "common/util/status.h"

namespace specd {

// A weight tensor resident in the backend. Matrices have ne0 = input features
// (row length) and ne1 = output features (rows), as GGUF stores them.
struct Weight {
  std::string name;
  GgmlType type = GgmlType::F32;
  int64_t ne0 = 0;
  int64_t ne1 = 1;
  const void* data = nullptr;  // backend address
  size_t nbytes = 0;
  bool present() const { return data != nullptr; }
};

// Host-side description of a weight to load (points into the GGUF mapping).
// host_data == nullptr asks the backend to synthesize the weight in place:
// random but valid blocks (finite scales, unit-scale activations), used to
// benchmark shapes without files. `resident` names the weight already on
// this backend's device, in its layout (WeightLayout), at that backend
// address: mapped from another process that loaded the same bytes
// (common/engine/weight_sharing.h). LoadWeight then only wraps it: nothing
// is copied, allocated or counted as this backend's.
struct WeightSource {
  std::string name;
  GgmlType type;
  int64_t ne0, ne1;
  const void* host_data;
  size_t nbytes;
  const void* resident = nullptr;
};

// Geometry of the paged KV pool: per layer, n_blocks blocks, each holding
// block_size positions of all KV heads. Element type F32, F16 or Q8_0.
struct KvLayout {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  int n_blocks = 0;
  GgmlType type = GgmlType::F16;
  // Bytes of one block of one layer for K (V is the same).
  size_t BlockBytes() const;
  size_t TotalBytes() const { return BlockBytes() * 2 * n_layers * static_cast<size_t>(n_blocks); }
};

// One sequence taking part in a batch.
struct BatchSeq {
  int32_t slot = 0;                 // KV slot id (stable for the sequence's life)
  int32_t kv_len = 0;               // positions valid after this batch's writes
  std::vector<int32_t> blocks;      // block table: logical block i -> pool block
};

// A ragged batch. tokens/pos/seq_index have one entry per token; seqs lists the
// distinct sequences. out_rows selects the tokens whose logits are wanted, in
// the order the logits come back. `fed` (empty, or one entry per token) names
// tokens that are read from backend memory when the batch runs, e.g. a token
// an earlier Sample wrote on the device: the host never sees it
// (tokens[t] is then a placeholder).
struct Batch {
  std::vector<int32_t> tokens;
  std::vector<const int32_t*> fed;
  std::vector<int32_t> pos;
  std::vector<int32_t> seq_index;   // index into seqs
  std::vector<BatchSeq> seqs;
  std::vector<int32_t> out_rows;
  int n_tokens() const { return static_cast<int>(tokens.size()); }
  int n_out() const { return static_cast<int>(out_rows.size()); }
  int max_blocks() const;
};

enum class RopeStyle { kNormal = 0, kNeox = 2 };  // values as llama.cpp's rope types

struct RopeParams {
  RopeStyle style = RopeStyle::kNormal;
  int n_dims = 0;          // rotated dims per head (<= head_dim)
  float freq_base = 10000.0f;
  float freq_scale = 1.0f; // 1 / linear scaling factor
};

// One logits row turned into a token by the sampler's rule (common/sampler):
// ProcessLogits, then the draw SampleDist(dist, Uniform01(seed, stream,
// counter)) (greedy: the argmax).
struct SampleRow {
  int row = 0;  // logits row of the current batch's outputs
  SamplingParams params;
  uint64_t stream = 0, counter = 0;
  // The tokens before this one, for the repetition penalty: `recent` (host),
  // then n_recent_dev tokens at recent_dev (backend memory: tokens sampled
  // by earlier passes).
  std::vector<int32_t> recent;
  const int32_t* recent_dev = nullptr;
  int n_recent_dev = 0;
  int32_t* token = nullptr;      // backend memory: the token drawn
  float* confidence = nullptr;   // backend memory, or null: Confidence() (sampler.h)
  float* probs = nullptr;        // backend memory, or null: the processed distribution, vocab floats (dense)
};

// One sequence's verify: the acceptance rule (common/spec/acceptance.h) on
// the target's processed distributions of logits rows row0..row0+k.
struct AcceptRows {
  int row0 = 0;
  int k = 0;
  SamplingParams params;
  int64_t pos0 = 0;                // position of x_1 (the random numbers' counter)
  std::vector<int32_t> recent;     // tokens before x_1 (penalty window); row t also sees x_1..x_t
  std::vector<int32_t> proposals;  // x_1..x_k
  const float* q = nullptr;        // backend memory: k dense draft rows; null: one-hot at the proposals
  int32_t* out = nullptr;          // backend memory: {n_accepted, next_token, bonus}
};

struct AttentionParams {
  int layer = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float scale = 1.0f;      // usually 1/sqrt(head_dim)
};

// Memory a backend has committed, for the ledger.
struct BackendMemory {
  size_t weights = 0;
  size_t kv_pool = 0;
  size_t activations = 0;
  size_t other = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string Name() const = 0;
  // Free memory available for this backend (device memory for CUDA).
  virtual size_t AvailableMemory() const = 0;

  // ---- resources (at load time) ----
  // Makes a weight resident. The CPU backend references the GGUF mapping
  // (zero copy); the CUDA backend uploads it once.
  virtual absl::StatusOr<Weight> LoadWeight(const WeightSource& src) = 0;

  // ---- weights shared with other processes (common/engine/weight_sharing.h) ----
  // The device's identity in the device registry (common/memory/
  // device_registry.h): "GPU-<uuid>" on CUDA, "host" for host memory.
  virtual std::string DeviceId() const { return "host"; }
  // How weights are stored on the device: two processes share a weight only
  // when both say the same (a build that repacked weights would say another).
  virtual std::string WeightLayout() const { return Name(); }
  // LoadWeight places the following weights in [base, base + bytes): one
  // allocation the caller exports to other processes, instead of the
  // backend's own memory. Unimplemented where weights are not copied (cpu:
  // they stay in the file mapping, which the page cache already shares).
  virtual absl::Status PlaceWeightsIn(void* base, size_t bytes) {
    return absl::UnimplementedError(Name() + " backend: weights are not copied to a device region");
  }
  // Bytes of such a region one tensor takes (its stored layout, padding, alignment).
  virtual size_t WeightFootprint(GgmlType type, int64_t ne0, int64_t ne1) const {
    return RowBytes(type, ne0) * static_cast<size_t>(ne1);
  }
  virtual absl::Status InitKv(const KvLayout& layout) = 0;
  // Activation buffers, allocated once for the largest batch.
  virtual absl::StatusOr<float*> AllocActivations(size_t n_floats) = 0;
  virtual BackendMemory Memory() const = 0;

  // ---- per batch ----
  // Makes the batch's tokens, positions and block tables visible to the ops.
  virtual absl::Status SetBatch(const Batch& batch) = 0;

  // out[t, :] = emb[tokens[t], :]  (emb may be quantized)
  virtual void Embed(const Weight& emb, float* out) = 0;
  // out[r, :] = x[r, :] / rms(x[r, :]) * w   for r < rows (dim = w.ne0); out may be x.
  virtual void RmsNorm(const float* x, const Weight& w, float eps, int rows, float* out) = 0;
  // x += r; out = RmsNorm(x)   (fused residual add + norm)
  virtual void AddRmsNorm(float* x, const float* r, const Weight& w, float eps, int rows, float* out) = 0;
  // y[t, :] = W x[t, :] (+ bias)  for t < n;  W is ne1 x ne0, x is n x ne0.
  virtual void MatMul(const Weight& w, const Weight* bias, const float* x, int n, float* y) = 0;
  // In-place rotary embedding of x[t] (n_heads heads of head_dim) at pos[t].
  virtual void Rope(float* x, int n_heads, int head_dim, const RopeParams& p) = 0;
  // Writes k, v of every batch token into the KV pool at its (sequence, pos),
  // then out[t] = softmax(q[t] K^T * scale, causal) V over the sequence's
  // positions 0..pos[t]. q: n x n_heads*head_dim, k/v: n x n_kv_heads*head_dim.
  virtual void Attention(const float* q, const float* k, const float* v, const AttentionParams& p,
                         float* out) = 0;
  // out = silu(gate) * up, n rows of `dim`.
  virtual void SwiGLU(const float* gate, const float* up, int n, int dim, float* out) = 0;
  // x += y over n floats.
  virtual void Add(float* x, const float* y, int64_t n) = 0;
  // out[i, :] = x[out_rows[i], :]  (the batch's out_rows), rows of `dim`.
  virtual void GatherOutRows(const float* x, int dim, float* out) = 0;

  // ---- speculative steps: sampling and acceptance where the logits are ----
  // Both follow the rules of common/sampler and common/spec/acceptance.h: the
  // CPU backend calls those implementations, the CUDA backend runs kernels
  // that follow them (same random numbers; sums in another order). Results
  // go to backend memory; nothing waits. `logits`: the address
  // Model::Forward returned for the current batch.
  virtual void Sample(const float* logits, int vocab, const std::vector<SampleRow>& rows) = 0;
  virtual void Accept(const float* logits, int vocab, const std::vector<AcceptRows>& seqs) = 0;
  // Backend memory for small results and rows (zeroed); lives as long as the backend.
  virtual absl::StatusOr<void*> AllocBuffer(size_t bytes) = 0;
  // Enqueues a copy of host memory to backend memory, ordered before later ops.
  virtual absl::Status WriteBytes(const void* host, void* dst, size_t bytes) = 0;
  // Whether backend addresses are host addresses (CPU): results can be read
  // where they are, and every op has finished when it returns.
  virtual bool HostMemory() const = 0;
  // Timing marks in the queued work: Mark() notes this point, and after a
  // wait (ReadBytes, ReadToHost, Synchronize) Seconds(a, b) is the time the
  // work between two marks took; ClearMarks() drops them.
  virtual int Mark() = 0;
  virtual double Seconds(int a, int b) = 0;
  virtual void ClearMarks() = 0;

  // Copies n floats from a backend address to host memory; waits for all work.
  virtual absl::Status ReadToHost(const float* src, float* host, size_t n) = 0;
  // Copies bytes from backend memory to host memory; waits for all work.
  virtual absl::Status ReadBytes(const void* src, void* host, size_t bytes) = 0;
  // Page-locks host memory that results are read into (CUDA: registered with
  // the driver), so that a read into it is one DMA rather than a copy staged
  // through the driver's pageable path; UnpinHost before freeing it. Backends
  // in host memory have nothing to do.
  virtual absl::Status PinHost(void* /*p*/, size_t /*bytes*/) { return absl::OkStatus(); }
  virtual void UnpinHost(void* /*p*/) {}
  // Waits for all queued work; reports any asynchronous (device) error.
  virtual absl::Status Synchronize() = 0;

  // Work this backend ran cold so far: batches it did not replay as it had
  // prepared them, but ran while preparing (the CUDA backend runs a shape
  // eagerly the first time it is seen and captures its graph the second;
  // steady eager runs, with graphs off or past their size, are not cold).
  // Only grows; the engine compares it around a forward (Engine::Timing::cold).
  // CPU: 0 (nothing to prepare, every forward is warm).
  virtual int64_t ColdRuns() const { return 0; }
  // Whether a batch shape's first runs are cold (above): then running each
  // step shape once before serving pays (common/spec/warmup.h).
  virtual bool PreparesShapes() const { return false; }

  // Memory bandwidth of this backend's memory in bytes/s, bytes read plus
  // bytes written by a large copy (the roofline's ceiling). 0: unknown.
  virtual double MeasureCopyBandwidth(size_t bytes) { return 0.0; }
};

// Creates a backend by name: "cpu" or "cuda" (if built). threads applies to cpu.
struct BackendOptions {
  std::string name = "cpu";
  int threads = 0;      // cpu: 0 = all cores
  int cpu_spin_us = 200;  // cpu: how long a pool thread polls for the next job before it sleeps (0: at once)
  std::string cpu_dot_kernels = "auto";  // cpu: the dot-product kernel build (SetDotKernel in quant.h)
  std::string cpu_float_activations;     // cpu: weights (tensor-name substring, "all") with float activations
  int device = 0;       // cuda: device ordinal
  bool cuda_graphs = true;
  bool cuda_pdl = true;  // programmatic dependent launch between kernels (sm_90)
  // Positions per attention split (a multiple of kAttnSplitStep up to
  // kAttnSplitMax: one warp per 32 positions, at most 8 in the tensor-core
  // kernel); 0: the built-in default. Fixed per process: decode, verify and
  // prefill must split the same way to give the same bits. CreateBackend
  // refuses other values.
  static constexpr int kAttnSplitStep = 32, kAttnSplitMax = 256;
  int cuda_attn_split = 0;
  // cuda: prompt chunks of up to this many tokens on Q4_K / Q5_K / Q6_K
  // weights multiply the quantized tiles directly (LaunchQGemm); longer
  // ones, other types, or 0: F16 tiles and cuBLAS.
  int cuda_qgemm_max_tokens = 256;
  // cuda: the column counts whose products on Q4_K / Q5_K weights run the
  // sm_90a wgmma kernel, "MIN-MAX" (1 <= MIN <= MAX <= kWgmmaMaxCols, the
  // matvec's columns a launch) or "off"; empty: the built-in range (9-32:
  // round 43 measured it faster there, slower below 9). Checked by
  // CreateBackend (ParseWgmmaCols).
  static constexpr int kWgmmaMaxCols = 32;
  std::string cuda_wgmma_cols;
  // Sample/Accept in device kernels (no host round trip per token); off:
  // the rows are read back and the reference rules run on the host
  // (host_sample.h).
  bool cuda_device_sampling = true;
  // cuda: bytes of the F16 slab that prompt GEMMs dequantize weight rows into
  // (0: kPromptSlabMin); the engine sizes it from the model
  // (Engine::PromptSlabBytes) and plans it in the memory ledger.
  static constexpr size_t kPromptSlabMin = size_t{64} << 20, kPromptSlabMax = size_t{256} << 20;
  size_t cuda_prompt_slab = 0;
};
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& opts);
// BackendOptions::cuda_wgmma_cols: "MIN-MAX" -> {MIN, MAX}, "off" -> {0, 0}.
absl::StatusOr<std::pair<int, int>> ParseWgmmaCols(const std::string& v);
// Backends compiled into this build, e.g. {"cpu", "cuda"}.
std::vector<std::string> AvailableBackends();

}  // namespace specd
