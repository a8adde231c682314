// An Engine is one resident model: the GGUF mapping, its tokenizer, a backend
// holding the weights, and a paged KV pool shared by up to max_seqs sequences.
// It runs batches of tokens for several sequences in one forward pass
// (chunked when larger than max_batch_tokens) and keeps each sequence's KV
// length. Workers and the in-process generator are built on it.
//
// Memory is planned before anything is loaded: weights + KV pool +
// activations + exchange buffers + runtime against the budget, which is one
// budget for the device: what other engines on the device hold (the device
// registry, common/memory/device_registry.h) counts against it too. If the
// plan does not fit, Create refuses with the ledger in the error. Nothing is
// ever offloaded. A target can export its weights and a draft map the ones
// it holds identically instead of loading a second copy
// (common/engine/weight_sharing.h); the ledger shows those apart.
#pragma once
#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/backend/backend.h"
#include "common/gguf/gguf.h"
#include "common/engine/weight_sharing.h"
#include "common/kv/block_manager.h"
#include "common/memory/device_registry.h"
#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/config.h"
#include "common/util/status.h"

namespace specd {

struct EngineOptions {
  enum class ShareWeights { kOff, kExport, kImport };
  std::string model_path;
  BackendOptions backend;
  int max_seqs = 8;             // concurrent sequences (KV slots)
  int max_seq_len = 4096;       // positions per sequence, draft lookahead included
  // Tokens per forward pass (prefill chunk). 512: a prefill chunk dequantizes
  // every weight matrix once for cuBLAS, so longer chunks pay it over more
  // tokens (H200, 27B-class: 1024-token prompts 3004 tok/s at 256, 4080 at 512;
  // docs/PERFORMANCE.md round 13) for ~0.1 GiB more activations.
  static constexpr int kDefaultMaxBatchTokens = 512;
  int max_batch_tokens = kDefaultMaxBatchTokens;
  int max_out_rows = 64;        // logits rows per forward pass
  GgmlType kv_type = GgmlType::F16;
  int kv_block_size = 16;
  int64_t kv_blocks = 0;        // 0: enough for max_seqs sequences of max_seq_len
  int64_t memory_budget = -1;   // bytes; -1: the backend's available memory
  int64_t exchange_bytes = 0;   // exchange buffers the worker allocates (ledger only)

  // One budget per device: "auto" registers GPU engines in
  // DeviceRegistry::DefaultRoot() (cpu engines plan alone), "off", or a
  // directory (any backend, tests included).
  std::string device_registry = "auto";
  std::string role = "engine";  // in the registry: "target", "draft", or the tool's name
  // kExport: place the weights in a region other processes can map, and
  // publish it; kImport: map the tensors a live exporter on the device holds
  // identically (the rest is loaded), else load an own copy (logged).
  ShareWeights share_weights = ShareWeights::kOff;
  int digest_threads = 0;       // threads computing tensor digests (0: all cores)

  // Declares the options shared by every process that hosts a model.
  static void AddFlags(Config* cfg, const std::string& prefix = "");
  // The workers' --share-weights: auto (share what can be: `role_auto` is
  // kExport for a target, kImport for a draft) or off.
  static void AddShareWeightsFlag(Config* cfg, const std::string& help);
  static absl::StatusOr<ShareWeights> ShareWeightsFromConfig(const Config& cfg, ShareWeights role_auto);
  static absl::StatusOr<EngineOptions> FromConfig(const Config& cfg, const std::string& prefix = "");
  // The backend's flags among AddFlags' (all but --cuda-device-sampling, which FromConfig adds).
  static BackendOptions BackendFromConfig(const Config& cfg, const std::string& prefix = "");
};

struct MemoryLedger {
  std::string device;
  size_t weights = 0, kv_pool = 0, activations = 0, exchange = 0;
  // The backend's memory beyond those: the CUDA context (module code
  // included), the cuBLAS workspace, dequantization tiles, matmul and
  // attention scratch, graphs, batch metadata.
  size_t runtime = 0;
  // Weights mapped from another process (held and counted there, not here).
  size_t shared = 0;
  int64_t shared_from = 0;  // that process's pid
  // What the other engines on the device hold (device registry), against the
  // same budget, and one line on each.
  size_t others = 0;
  std::vector<std::string> others_detail;
  // What the driver charges to this process beyond the plan (measured after
  // loading, when the driver says: NVML).
  size_t unplanned = 0;
  int64_t budget = -1;  // -1: unbounded
  // This engine's own memory (shared weights excluded).
  size_t total() const { return weights + kv_pool + activations + exchange + runtime + unplanned; }
  bool fits() const { return budget < 0 || total() + others <= static_cast<size_t>(budget); }
  // Moves `bytes` of weights to the shared line (mapped from `from_pid`).
  void ShareWeights(size_t bytes, int64_t from_pid);
  // The other engines' entries; `budget_is_free_memory`: the budget is the
  // device's free memory, which already excludes what they allocated.
  void SetOthers(const std::vector<RegistryEntry>& entries, bool budget_is_free_memory);
  std::string ToString() const;  // multi-line table
};

// The refusal when `l` does not fit: the ledger, the other engines, and what
// to change.
absl::Status RefuseIfOver(const MemoryLedger& l, const std::string& what);

class Engine {
 public:
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& opts);
  // A model of shape `cfg` whose weights the backend synthesizes (benchmarks
  // of shapes without files; see Model::CreateSynthetic). No tokenizer.
  static absl::StatusOr<std::unique_ptr<Engine>> CreateSynthetic(const ModelConfig& cfg,
                                                                 const Model::TypeFor& type_for,
                                                                 const EngineOptions& opts);
  // The ledger Create would produce for `file`, without loading anything.
  static absl::StatusOr<MemoryLedger> Plan(const GgufFile& file, const EngineOptions& opts, int64_t device_free);
  static absl::StatusOr<MemoryLedger> PlanFor(const ModelConfig& cfg, size_t weight_bytes, const EngineOptions& opts,
                                              int64_t device_free);
  // The CUDA backend's slab for prompt GEMMs (BackendOptions::cuda_prompt_slab):
  // the largest layer matrix in F16, from 64 MiB up to 256 MiB (round 29,
  // H100, the 27B target: prefill of 128 / 512 tokens 9% / 7% faster with its
  // 262 MB FFN matrices in one GEMM each than in 64 MiB chunks; L2-sized
  // 16-32 MiB chunks were slower, 384-512 MiB no faster).
  static size_t PromptSlabBytes(const ModelConfig& cfg);
  // `b` with what the model decides of the backend (the prompt slab).
  static BackendOptions BackendFor(const ModelConfig& cfg, BackendOptions b);
  ~Engine();

  const EngineOptions& options() const { return opts_; }
  const ModelConfig& config() const { return model_->config(); }
  // Every engine made from a file has a tokenizer (synthetic ones do not).
  bool has_tokenizer() const { return tok_ != nullptr; }
  const Tokenizer& tokenizer() const { return *tok_; }
  const Model& model() const { return *model_; }
  const GgufFile& file() const { return *file_; }  // engines made from a file only
  Backend* backend() const { return backend_.get(); }
  const MemoryLedger& ledger() const { return ledger_; }
  // The process whose weights this engine maps (pid 0: none); the mapping
  // must be dropped when that process goes (common/engine/weight_sharing.h).
  const ProcessId& shared_from() const { return shared_from_; }
  // The device registry this engine is recorded in (nullptr: it plans alone).
  const DeviceRegistry* registry() const { return registry_.get(); }
  // The weights this engine exports (nullptr: none).
  const WeightExport* exported() const;
  // How its weights are held, in words ("own copy: ...", "maps ...", "exports ...").
  const std::string& weight_sharing() const { return sharing_; }
  const KvBlockManager& kv() const { return kv_; }
  int vocab_size() const { return model_->config().vocab_size; }

  // ---- sequences ----
  absl::Status NewSequence(int32_t id);
  void Release(int32_t id);
  absl::Status Truncate(int32_t id, int64_t len);
  int64_t Length(int32_t id) const { return kv_.Length(id); }  // -1 if absent
  bool Exists(int32_t id) const { return kv_.Exists(id); }
  int active_sequences() const { return static_cast<int>(kv_.Sequences().size()); }

  // Tokens to append to one sequence's KV; logits are computed for the last
  // n_logits of them.
  struct Feed {
    int32_t seq = 0;
    std::vector<int32_t> tokens;
    int n_logits = 1;
    // Empty, or per token: read it from this backend address when the pass
    // runs (a token sampled on the device; tokens[i] is then a placeholder).
    std::vector<const int32_t*> fed;
  };
  // Where a feed's logits rows are in a pass: rows row0 .. row0 + n_logits - 1.
  struct PassRows {
    size_t feed = 0;
    int row0 = 0;
  };
  // Gets each pass's logits (a backend address, valid during the call) and the
  // feeds whose rows it holds, to enqueue work on them (Backend::Sample, Accept).
  using PassFn = std::function<void(const float* logits, const std::vector<PassRows>& rows)>;

  // Runs all feeds in as few forward passes as the batch limits allow, each
  // feed's logits rows within one pass, and calls on_pass after each pass.
  // Does not wait for the device (Read does). On error every sequence keeps
  // its previous length.
  // split_timing: mark the end of each forward so that Timing tells the
  // forwards from what on_pass enqueued (on CUDA this keeps the two out of
  // one graph; leave it off where that split is not wanted).
  absl::Status Enqueue(const std::vector<Feed>& feeds, const PassFn& on_pass, bool split_timing = false);
  // The device time of the work enqueued since the last Read: the forwards,
  // and what on_pass enqueued after them.
  struct Timing {
    double forward = 0, after = 0;
    // Some of the work ran cold (Backend::ColdRuns grew): its times are not
    // what the same shapes cost once the backend has prepared them.
    bool cold = false;
  };
  // Waits for the enqueued work, then copies `bytes` of backend memory to
  // `host` (none: just waits); `timing` (optional) gets the work's Timing.
  absl::Status Read(const void* src, void* host, size_t bytes, Timing* timing = nullptr);
  // Runs all feeds and appends the logits rows to `logits` in feed order
  // (sum of n_logits rows of vocab floats): the reference path.
  absl::Status Run(const std::vector<Feed>& feeds, std::vector<float>* logits);
  // The same into caller memory with room for the rows (none initialized:
  // a bench's pinned buffer, written as is by the backend's read).
  absl::Status RunInto(const std::vector<Feed>& feeds, float* logits);

  // Counters since start.
  struct Counters {
    int64_t forwards = 0, tokens = 0;
    double forward_seconds = 0;  // device time of the forwards (and the sampling enqueued with them)
  };
  const Counters& counters() const { return counters_; }

 private:
  Engine() = default;
  absl::Status Finish(const ModelConfig& cfg);  // KV pool after the model is resident
  // Reserves the plan in the device registry (refusing when it does not fit
  // next to the other engines there), or checks the budget alone.
  absl::Status Reserve(const std::string& what);
  // Marks the entry ready (with the export), after comparing the plan with
  // the driver's figure for this process when it has one.
  absl::Status Publish(std::optional<WeightExport> exported, const std::string& what);
  EngineOptions opts_;
  // Destroyed in reverse: the model and backend first, then the shared
  // region they used, then the registry entry describing all of it.
  std::unique_ptr<DeviceRegistry> registry_;  // null: this engine plans alone
  std::unique_ptr<Registration> registration_;
  std::shared_ptr<WeightImport> import_;
  std::unique_ptr<WeightExporter> exporter_;
  ProcessId shared_from_;
  std::string sharing_ = "own copy";
  std::unique_ptr<GgufFile> file_;
  std::unique_ptr<Tokenizer> tok_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  KvBlockManager kv_{0, 16};
  MemoryLedger ledger_;
  Counters counters_;
  // Marks around the passes enqueued since the last Read: {pass start, after
  // the forward (-1: not split), after on_pass}.
  std::vector<std::array<int, 3>> marks_;
  int64_t cold_runs_ = 0;  // Backend::ColdRuns() at the last Read
};

// Parses "f32", "f16", "q8_0" (case-insensitive).
absl::StatusOr<GgmlType> ParseKvType(const std::string& s);

}  // namespace specd
