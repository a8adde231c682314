#include "common/engine/engine.h"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/memory/driver_memory.h"
#include "common/util/log.h"

namespace specd {

absl::StatusOr<GgmlType> ParseKvType(const std::string& s) {
  const std::string l = absl::AsciiStrToLower(s);
  if (l == "f32") return GgmlType::F32;
  if (l == "f16") return GgmlType::F16;
  if (l == "q8_0" || l == "q8") return GgmlType::Q8_0;
  return absl::InvalidArgumentError(absl::StrCat("unknown KV cache type '", s, "' (f32, f16, q8_0)"));
}

void EngineOptions::AddFlags(Config* c, const std::string& p) {
  c->AddString(p + "model", "", "path of the GGUF model file");
  c->AddString(p + "backend", "cpu", "compute backend: cpu or cuda");
  c->AddInt(p + "threads", 0, "CPU backend threads (0: all cores)", 0, 1024);
  c->AddInt(p + "cpu-spin-us", 200,
            "CPU backend: microseconds a pool thread polls for the next job before it sleeps (0: at once; less "
            "leaves more of a shared machine to the other processes, e.g. the draft and target workers on a few "
            "cores)",
            0, 1000000);
  c->AddString(p + "cpu-dot-kernels", "auto",
               "CPU backend: the dot-product kernel build (auto: the best this CPU has; portable, sse2, avx2, avx512, "
               "avxvnni, avx512vnni)");
  c->AddString(p + "cpu-float-activations", "",
               "CPU backend: quantized weights whose tensor name holds this (all: every one) multiply float "
               "activations instead of int8 ones (an accuracy A/B; slower)");
  c->AddInt(p + "device", 0, "CUDA device ordinal", 0, 64);
  c->AddInt(p + "max-seqs", 8, "sequences resident at once (KV slots)", 1, 4096);
  c->AddInt(p + "max-seq-len", 4096, "positions per sequence: prompt + output + draft lookahead", 16, 1 << 20);
  c->AddInt(p + "max-batch-tokens", EngineOptions::kDefaultMaxBatchTokens, "tokens per forward pass (prefill chunk size)",
            1, 1 << 16);
  c->AddString(p + "kv-type", "f16", "KV cache element type: f32, f16 or q8_0");
  c->AddInt(p + "kv-block-size", 16, "positions per KV block", 1, 1024);
  c->AddInt(p + "kv-blocks", 0, "KV pool size in blocks (0: max-seqs x max-seq-len)", 0, 1ll << 32);
  c->AddBytes(p + "vram-budget", "auto",
              "the device's memory budget, shared by every specd process on the device: weights + KV + "
              "activations + exchange buffers + runtime of this one plus what the others hold (auto: the "
              "device's free memory)");
  c->AddBool(p + "cuda-device-sampling", true,
             "CUDA: sample and accept in device kernels; off: the logits rows are read back and the CPU "
             "reference samples them");
  c->AddInt(p + "cuda-attn-split", 0,
            absl::StrCat("CUDA: KV positions per attention split block, a multiple of ", BackendOptions::kAttnSplitStep,
                         " up to ", BackendOptions::kAttnSplitMax,
                         " (0: the built-in 128); longer splits mean fewer blocks to merge at long contexts"),
            0, BackendOptions::kAttnSplitMax);
  c->AddString(p + "cuda-wgmma-cols", "",
               absl::StrCat("CUDA (sm_90a builds on sm_90 devices): the column counts whose Q4_K / Q5_K products run "
                            "the wgmma kernel, MIN-MAX (1-", BackendOptions::kWgmmaMaxCols,
                            ") or off (empty: 9-32, where it measured faster than the mma.sync kernels)"));
  c->AddInt(p + "cuda-qgemm-max-tokens", 256,
            "CUDA: prompt chunks of up to this many tokens on Q4_K / Q5_K / Q6_K weights multiply the "
            "quantized tiles directly; longer chunks and other types dequantize to F16 for cuBLAS (0: always)",
            0, 1 << 20);
  c->AddString(p + "device-registry", "auto",
               "where the processes on a device record what they hold, so that they share one budget: auto ("
               "GPU backends: /dev/shm/specd-registry-UID; cpu: off), off, or a directory");
}

void EngineOptions::AddShareWeightsFlag(Config* c, const std::string& help) {
  c->AddString("share-weights", "auto", help);
}

absl::StatusOr<EngineOptions::ShareWeights> EngineOptions::ShareWeightsFromConfig(const Config& c,
                                                                                  ShareWeights role_auto) {
  const std::string v = c.GetString("share-weights");
  if (v == "auto") return role_auto;
  if (v == "off") return ShareWeights::kOff;
  return absl::InvalidArgumentError(absl::StrCat("--share-weights takes auto or off, not '", v, "'"));
}

BackendOptions EngineOptions::BackendFromConfig(const Config& c, const std::string& p) {
  BackendOptions b;
  b.name = c.GetString(p + "backend");
  b.threads = static_cast<int>(c.GetInt(p + "threads"));
  b.cpu_spin_us = static_cast<int>(c.GetInt(p + "cpu-spin-us"));
  b.cpu_dot_kernels = c.GetString(p + "cpu-dot-kernels");
  b.cpu_float_activations = c.GetString(p + "cpu-float-activations");
  b.device = static_cast<int>(c.GetInt(p + "device"));
  b.cuda_attn_split = static_cast<int>(c.GetInt(p + "cuda-attn-split"));
  b.cuda_qgemm_max_tokens = static_cast<int>(c.GetInt(p + "cuda-qgemm-max-tokens"));
  b.cuda_wgmma_cols = c.GetString(p + "cuda-wgmma-cols");
  return b;
}

absl::StatusOr<EngineOptions> EngineOptions::FromConfig(const Config& c, const std::string& p) {
  EngineOptions o;
  o.model_path = c.GetString(p + "model");
  o.backend = BackendFromConfig(c, p);
  if (!o.backend.cuda_wgmma_cols.empty()) SPECD_RETURN_IF_ERROR(ParseWgmmaCols(o.backend.cuda_wgmma_cols).status());
  o.backend.cuda_device_sampling = c.GetBool(p + "cuda-device-sampling");
  o.max_seqs = static_cast<int>(c.GetInt(p + "max-seqs"));
  o.max_seq_len = static_cast<int>(c.GetInt(p + "max-seq-len"));
  o.max_batch_tokens = static_cast<int>(c.GetInt(p + "max-batch-tokens"));
  SPECD_ASSIGN_OR_RETURN(o.kv_type, ParseKvType(c.GetString(p + "kv-type")));
  o.kv_block_size = static_cast<int>(c.GetInt(p + "kv-block-size"));
  o.kv_blocks = c.GetInt(p + "kv-blocks");
  o.memory_budget = c.GetBytes(p + "vram-budget");
  o.device_registry = c.GetString(p + "device-registry");
  if (o.device_registry.empty()) return absl::InvalidArgumentError("--" + p + "device-registry: auto, off or a directory");
  if (o.model_path.empty()) return absl::InvalidArgumentError("--" + p + "model is required");
  return o;
}

void MemoryLedger::ShareWeights(size_t bytes, int64_t from_pid) {
  bytes = std::min(bytes, weights);
  weights -= bytes;
  shared += bytes;
  shared_from = from_pid;
}

void MemoryLedger::SetOthers(const std::vector<RegistryEntry>& entries, bool budget_is_free_memory) {
  others = BytesAgainstBudget(entries, budget_is_free_memory);
  others_detail.clear();
  for (const RegistryEntry& e : entries) {
    const bool counted = !budget_is_free_memory || e.state == "loading";
    others_detail.push_back(e.Describe() + (counted ? "" : " [already out of the free memory]"));
  }
}

std::string MemoryLedger::ToString() const {
  std::ostringstream os;
  auto fmt = [](size_t b) { return Config::FormatBytes(static_cast<int64_t>(b)); };
  auto row = [&](const char* name, const std::string& v, const std::string& note = "") {
    os << "  " << name << std::string(16 - std::string(name).size(), ' ') << v << (note.empty() ? "" : "  (" + note + ")")
       << "\n";
  };
  os << "memory ledger (" << device << "):\n";
  row("weights", fmt(weights));
  if (shared > 0)
    row("shared weights", fmt(shared),
        absl::StrCat("mapped from ", shared_from ? absl::StrCat("pid ", shared_from) : "the target", ", held there"));
  row("kv pool", fmt(kv_pool));
  row("activations", fmt(activations));
  row("exchange", fmt(exchange));
  row("runtime", fmt(runtime), runtime ? "CUDA context, cuBLAS workspace, scratch, graphs" : "");
  if (unplanned > 0) row("beyond plan", fmt(unplanned), "the driver's figure for this process exceeds the plan");
  row("total", fmt(total()));
  if (!others_detail.empty() || others > 0) {
    row("other engines", fmt(others), "on this device");
    for (const std::string& d : others_detail) os << "    " << d << "\n";
  }
  std::string verdict = fits() ? "fits" : "DOES NOT FIT";
  if (budget >= 0 && fits())
    absl::StrAppend(&verdict, ", ", fmt(static_cast<size_t>(budget) - total() - others), " left");
  row("budget", budget < 0 ? std::string("unbounded") : Config::FormatBytes(budget), verdict);
  return os.str();
}

namespace {
int64_t DefaultBlocks(const EngineOptions& o) {
  return static_cast<int64_t>(o.max_seqs) * ((o.max_seq_len + o.kv_block_size - 1) / o.kv_block_size);
}
}  // namespace

absl::StatusOr<MemoryLedger> Engine::Plan(const GgufFile& file, const EngineOptions& o, int64_t device_free) {
  SPECD_ASSIGN_OR_RETURN(ModelConfig cfg, ModelConfig::FromGguf(file));
  size_t weights = 0;
  for (const auto& t : file.tensors()) weights += t.nbytes;
  auto l = PlanFor(cfg, weights, o, device_free);
  if (!l.ok()) return absl::Status(l.status().code(), absl::StrCat(file.path(), ": ", l.status().message()));
  return l;
}

namespace {
KvLayout KvLayoutFor(const ModelConfig& cfg, const EngineOptions& o) {
  KvLayout kv;
  kv.n_layers = cfg.n_layers;
  kv.n_kv_heads = cfg.n_kv_heads;
  kv.head_dim = cfg.head_dim;
  kv.block_size = o.kv_block_size;
  kv.type = o.kv_type;
  kv.n_blocks = static_cast<int>(o.kv_blocks > 0 ? o.kv_blocks : DefaultBlocks(o));
  return kv;
}
}  // namespace

size_t Engine::PromptSlabBytes(const ModelConfig& cfg) {
  const size_t largest = 2 * static_cast<size_t>(cfg.d_model) * static_cast<size_t>(std::max(cfg.ffn_dim, cfg.q_dim()));
  return std::clamp(largest, BackendOptions::kPromptSlabMin, BackendOptions::kPromptSlabMax);
}

BackendOptions Engine::BackendFor(const ModelConfig& cfg, BackendOptions b) {
  b.cuda_prompt_slab = PromptSlabBytes(cfg);
  return b;
}

absl::StatusOr<MemoryLedger> Engine::PlanFor(const ModelConfig& cfg, size_t weight_bytes, const EngineOptions& o,
                                             int64_t device_free) {
  MemoryLedger l;
  l.device = o.backend.name;
  l.weights = weight_bytes;
  if (cfg.head_dim % TypeTraits(o.kv_type).block_size != 0)
    return absl::InvalidArgumentError(absl::StrCat("KV type ", TypeTraits(o.kv_type).name,
                                                   " needs a head dimension that is a multiple of ",
                                                   TypeTraits(o.kv_type).block_size, "; the model has ", cfg.head_dim));
  l.kv_pool = KvLayoutFor(cfg, o).TotalBytes();
  const int out_rows = std::min(o.max_out_rows, o.max_batch_tokens);
  l.activations = Model::ActivationFloats(cfg, o.max_batch_tokens, out_rows) * sizeof(float);
  l.exchange = static_cast<size_t>(o.exchange_bytes);
  // The CUDA backend's memory outside weights, KV and activations: the CUDA
  // context of the process (~500 MiB), the cuBLAS workspace, attention/matmul
  // scratch, the prompt's F16 activations and arena padding (~200 MiB), and
  // the prompt GEMMs' dequantization slab: 768 MiB as measured on an H200
  // with the smallest slab, the model's slab in its place.
  if (o.backend.name == "cuda") l.runtime = (768ull << 20) - BackendOptions::kPromptSlabMin + PromptSlabBytes(cfg);
  l.budget = o.memory_budget >= 0 ? o.memory_budget : device_free;
  return l;
}

absl::Status RefuseIfOver(const MemoryLedger& l, const std::string& what) {
  if (l.fits()) return absl::OkStatus();
  std::string why = "the memory plan does not fit the budget";
  if (l.others > 0 && l.budget >= 0 && l.total() <= static_cast<size_t>(l.budget))
    why = absl::StrCat("the memory plan fits the budget alone, but not next to what the other engines on this device "
                       "hold (",
                       Config::FormatBytes(static_cast<int64_t>(l.others)), "): one budget for the device");
  return absl::ResourceExhaustedError(absl::StrCat(
      what, ": ", why, "; refusing to start (nothing is offloaded).\n", l.ToString(),
      "Lower --max-seqs / --max-seq-len / --kv-blocks, use --kv-type q8_0, share the target's weights (a draft "
      "derived from it, --share-weights auto on both workers), or raise --vram-budget (the same on every worker "
      "of the device)."));
}

namespace {
absl::Status CheckLimits(const EngineOptions& o) {
  if (o.max_seqs < 1 || o.max_seq_len < 1 || o.max_batch_tokens < 1 || o.kv_block_size < 1)
    return absl::InvalidArgumentError("engine limits must be positive");
  return absl::OkStatus();
}

// The registry --device-registry names (null: this engine plans alone).
absl::StatusOr<std::unique_ptr<DeviceRegistry>> OpenRegistry(const EngineOptions& o, const Backend& b) {
  std::string root = o.device_registry;
  if (root == "off") return nullptr;
  if (root == "auto") {
    if (b.Name() == "cpu") return nullptr;  // host memory: each process plans against what is available
    root = DeviceRegistry::DefaultRoot();
  }
  auto r = DeviceRegistry::Open(root, b.DeviceId());
  if (!r.ok())
    return absl::Status(r.status().code(), absl::StrCat("device registry: ", r.status().message(),
                                                        " (--device-registry off: plan this process alone)"));
  return r;
}
}  // namespace

absl::Status Engine::Finish(const ModelConfig& cfg) {
  const KvLayout kv = KvLayoutFor(cfg, opts_);
  SPECD_RETURN_IF_ERROR(backend_->InitKv(kv));
  kv_ = KvBlockManager(kv.n_blocks, kv.block_size);
  return absl::OkStatus();
}

absl::Status Engine::Reserve(const std::string& what) {
  if (!registry_) return RefuseIfOver(ledger_, what);
  RegistryEntry me;
  me.role = opts_.role;
  me.model = what;
  me.state = "loading";
  me.bytes = ledger_.total();
  me.shared = ledger_.shared;
  me.shared_from = ledger_.shared_from;
  me.budget = opts_.memory_budget;
  SPECD_ASSIGN_OR_RETURN(registration_, registry_->Register(me, [&](const std::vector<RegistryEntry>& live) {
                           ledger_.SetOthers(live, opts_.memory_budget < 0);
                           return RefuseIfOver(ledger_, what);
                         }));
  SPECD_LOG(INFO) << "device registry: memory reserved" << Kv("entry", registration_->path())
                  << Kv("bytes", ledger_.total()) << Kv("other_engines", ledger_.others_detail.size());
  return absl::OkStatus();
}

absl::Status Engine::Publish(std::optional<WeightExport> exported, const std::string& what) {
  // The driver's figure for this process, where the driver has one: a plan
  // that fell short is corrected (and re-checked) rather than trusted.
  if (backend_->Name() == "cuda") {
    auto used = DriverMemoryOf(backend_->DeviceId(), static_cast<int64_t>(getpid()));
    if (used.ok()) {
      bool alone = true;  // the figure is this engine's only if it is the process's only engine
      if (registry_) {
        SPECD_ASSIGN_OR_RETURN(auto live, registry_->List());
        for (const RegistryEntry& e : live) alone &= e.proc.pid != getpid() || e.serial == registration_->entry().serial;
      }
      // NVML may or may not charge an IPC mapping to the importer: leave the
      // shared bytes out either way (never more than the plan's own share).
      const size_t own = *used > ledger_.shared ? *used - ledger_.shared : 0;
      SPECD_LOG(INFO) << "device memory by the driver" << Kv("process_bytes", *used)
                      << Kv("planned_bytes", ledger_.total()) << Kv("shared_bytes", ledger_.shared)
                      << Kv("only_engine_of_process", alone);
      if (alone && own > ledger_.total()) {
        ledger_.unplanned = own - ledger_.total() + ledger_.unplanned;
        SPECD_LOG(WARN) << "the memory plan fell short of the driver's figure for this process; the registry records "
                           "the driver's"
                        << Kv("unplanned", Config::FormatBytes(static_cast<int64_t>(ledger_.unplanned)));
        SPECD_RETURN_IF_ERROR(RefuseIfOver(ledger_, what));
      }
    } else {
      SPECD_LOG(DEBUG) << "no driver figure for this process" << Kv("why", used.status().message());
    }
  }
  if (!registration_) return absl::OkStatus();
  RegistryEntry e = registration_->entry();
  e.state = "ready";
  e.bytes = ledger_.total();
  e.exported = std::move(exported);
  return registration_->Update(e);
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& o) {
  SPECD_RETURN_IF_ERROR(CheckLimits(o));
  std::unique_ptr<Engine> e(new Engine());
  e->opts_ = o;
  e->opts_.max_out_rows = std::min(o.max_out_rows, o.max_batch_tokens);
  SPECD_ASSIGN_OR_RETURN(e->file_, GgufFile::Open(o.model_path));
  SPECD_ASSIGN_OR_RETURN(ModelConfig cfg, ModelConfig::FromGguf(*e->file_));
  SPECD_ASSIGN_OR_RETURN(e->tok_, Tokenizer::FromGguf(*e->file_));
  if (e->tok_->vocab_size() != cfg.vocab_size)
    return absl::InvalidArgumentError(absl::StrCat(o.model_path, ": tokenizer has ", e->tok_->vocab_size(),
                                                   " tokens but token_embd has ", cfg.vocab_size, " rows"));
  SPECD_ASSIGN_OR_RETURN(e->backend_, CreateBackend(BackendFor(cfg, o.backend)));
  Backend* be = e->backend_.get();
  SPECD_ASSIGN_OR_RETURN(e->registry_, OpenRegistry(o, *be));
  SPECD_ASSIGN_OR_RETURN(e->ledger_, Plan(*e->file_, e->opts_, static_cast<int64_t>(be->AvailableMemory())));
  e->ledger_.device = absl::StrCat(be->Name(), " ", be->DeviceId());
  using Share = EngineOptions::ShareWeights;
  SharedWeights shared;
  if (o.share_weights == Share::kImport) {
    std::string why;
    if (absl::Status st = WeightSharingSupport(*be); !st.ok()) {
      why = std::string(st.message());
    } else if (!e->registry_) {
      why = "--device-registry off: no other process's weights can be found";
    } else {
      SPECD_ASSIGN_OR_RETURN(auto live, e->registry_->List());
      shared = FindSharedWeights(live, *e->file_, *be, o.backend.device, o.digest_threads, &why);
    }
    if (shared.bytes > 0) {
      SPECD_LOG(INFO) << "weight sharing: mapping the tensors another process holds identically"
                      << Kv("shared", shared.description);
      e->ledger_.ShareWeights(shared.bytes, shared.from.pid);
      e->import_ = shared.import;
      e->shared_from_ = shared.from;
      e->sharing_ = "maps " + shared.description;
    } else {
      SPECD_LOG(INFO) << "weight sharing: loading an own copy of every tensor" << Kv("why", why);
      e->sharing_ = "own copy: " + why;
    }
  }
  SPECD_RETURN_IF_ERROR(e->Reserve(o.model_path));
  if (o.share_weights == Share::kExport) {
    absl::Status why = WeightSharingSupport(*be);
    if (why.ok() && !e->registry_) why = absl::FailedPreconditionError("--device-registry off: nowhere to publish");
    if (why.ok()) {
      size_t region = 0;
      for (const auto& t : e->file_->tensors())
        region += be->WeightFootprint(t.type, t.ne.empty() ? 1 : t.ne[0], t.ne.size() > 1 ? t.rows() : 1);
      auto x = PrepareWeightExport(be, o.backend.device, region, *e->file_);
      if (x.ok()) e->exporter_ = *std::move(x);
      else why = x.status();
    }
    if (!why.ok()) {
      SPECD_LOG(INFO) << "weight sharing: not exporting" << Kv("why", why.message());
      e->sharing_ = absl::StrCat("own copy, not exported: ", why.message());
    }
  }
  SPECD_ASSIGN_OR_RETURN(e->model_, Model::Load(*e->file_, be, e->opts_.max_batch_tokens, e->opts_.max_out_rows,
                                                shared.bytes > 0 ? &shared.resident : nullptr));
  SPECD_RETURN_IF_ERROR(e->Finish(cfg));
  std::optional<WeightExport> exported;
  if (e->exporter_) {
    const auto t0 = std::chrono::steady_clock::now();
    auto x = e->exporter_->Describe(*e->model_, DigestTensors(*e->file_, o.digest_threads));
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (x.ok()) {
      SPECD_LOG(INFO) << "weight sharing: exporting the weights to other processes on this device"
                      << Kv("tensors", x->tensors.size()) << Kv("bytes", Config::FormatBytes(static_cast<int64_t>(x->bytes)))
                      << Kv("kind", x->kind) << Kv("digest_seconds", secs);
      e->sharing_ = absl::StrCat("exports ", x->tensors.size(), " tensors (",
                                 Config::FormatBytes(static_cast<int64_t>(x->bytes)), ", ", x->kind, ")");
      exported = *std::move(x);
    } else {
      SPECD_LOG(WARN) << "weight sharing: not exporting" << Kv("why", x.status().message());
      e->sharing_ = absl::StrCat("own copy, not exported: ", x.status().message());
    }
  }
  SPECD_RETURN_IF_ERROR(e->Publish(std::move(exported), o.model_path));
  return e;
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::CreateSynthetic(const ModelConfig& cfg, const Model::TypeFor& type_for,
                                                                const EngineOptions& o) {
  SPECD_RETURN_IF_ERROR(CheckLimits(o));
  std::unique_ptr<Engine> e(new Engine());
  e->opts_ = o;
  e->opts_.max_out_rows = std::min(o.max_out_rows, o.max_batch_tokens);
  SPECD_ASSIGN_OR_RETURN(e->backend_, CreateBackend(BackendFor(cfg, o.backend)));
  SPECD_ASSIGN_OR_RETURN(e->registry_, OpenRegistry(o, *e->backend_));
  // Weight bytes are known only once the types are assigned; plan with the
  // KV and activations first, then check again with the weights.
  SPECD_ASSIGN_OR_RETURN(e->ledger_, PlanFor(cfg, 0, e->opts_, static_cast<int64_t>(e->backend_->AvailableMemory())));
  e->ledger_.device = absl::StrCat(e->backend_->Name(), " ", e->backend_->DeviceId());
  const std::string what = "synthetic " + cfg.Describe();
  SPECD_RETURN_IF_ERROR(e->Reserve(what));
  SPECD_ASSIGN_OR_RETURN(e->model_, Model::CreateSynthetic(cfg, type_for, e->backend_.get(), e->opts_.max_batch_tokens,
                                                           e->opts_.max_out_rows));
  e->ledger_.weights = e->model_->weight_stats().total_bytes;
  SPECD_RETURN_IF_ERROR(RefuseIfOver(e->ledger_, what));
  SPECD_RETURN_IF_ERROR(e->Finish(cfg));
  SPECD_RETURN_IF_ERROR(e->Publish(std::nullopt, what));
  return e;
}

const WeightExport* Engine::exported() const {
  return registration_ && registration_->entry().exported ? &*registration_->entry().exported : nullptr;
}

Engine::~Engine() = default;

absl::Status Engine::NewSequence(int32_t id) {
  if (active_sequences() >= opts_.max_seqs)
    return absl::ResourceExhaustedError(absl::StrCat("all ", opts_.max_seqs, " sequence slots are in use"));
  return kv_.Create(id);
}

void Engine::Release(int32_t id) { kv_.Release(id); }

absl::Status Engine::Truncate(int32_t id, int64_t len) { return kv_.Truncate(id, len); }

absl::Status Engine::Enqueue(const std::vector<Feed>& feeds, const PassFn& on_pass, bool split_timing) {
  const int V = vocab_size();
  // Validate everything first, so that a bad feed changes nothing.
  std::map<int32_t, int64_t> start_len;
  for (const Feed& f : feeds) {
    if (!kv_.Exists(f.seq)) return absl::NotFoundError(absl::StrCat("sequence ", f.seq, " does not exist"));
    if (start_len.count(f.seq)) return absl::InvalidArgumentError(absl::StrCat("sequence ", f.seq, " fed twice in one run"));
    if (f.tokens.empty()) return absl::InvalidArgumentError("empty feed");
    if (!f.fed.empty() && f.fed.size() != f.tokens.size())
      return absl::InvalidArgumentError("feed's fed[] differs in length from its tokens");
    if (f.n_logits < 0 || f.n_logits > static_cast<int>(f.tokens.size()))
      return absl::InvalidArgumentError("n_logits exceeds the tokens fed");
    if (f.n_logits > opts_.max_out_rows)
      return absl::InvalidArgumentError(absl::StrCat("feed wants ", f.n_logits, " logits rows (limit ", opts_.max_out_rows, ")"));
    for (int32_t t : f.tokens) {
      if (t < 0 || t >= V) return absl::InvalidArgumentError(absl::StrCat("token id ", t, " out of range [0, ", V, ")"));
    }
    const int64_t len = kv_.Length(f.seq);
    if (len + static_cast<int64_t>(f.tokens.size()) > opts_.max_seq_len)
      return absl::OutOfRangeError(absl::StrCat("sequence ", f.seq, " would reach ", len + f.tokens.size(),
                                                " positions (max-seq-len ", opts_.max_seq_len, ")"));
    start_len[f.seq] = len;
  }
  // Lengths only change at the end, so truncating to the start length frees
  // whatever blocks Reserve added.
  auto rollback = [&] {
    for (auto& [seq, len] : start_len) (void)kv_.Truncate(seq, len);
  };
  for (const Feed& f : feeds) {
    absl::Status st = kv_.Reserve(f.seq, start_len[f.seq] + static_cast<int64_t>(f.tokens.size()));
    if (!st.ok()) {
      rollback();
      return st;
    }
  }

  // Pack tokens into forward passes: at most max_batch_tokens tokens and
  // max_out_rows logits rows each. A feed may span several passes (chunked
  // prefill), but its logits rows are all in one (they are the last tokens
  // of the feed: when they do not fit behind what the pass holds, the pass
  // ends there).
  size_t fi = 0, ti = 0;
  std::map<int32_t, int64_t> fed;  // tokens of each feed already placed
  for (const Feed& f : feeds) fed[f.seq] = 0;
  std::vector<PassRows> rows;
  Batch b;
  while (fi < feeds.size()) {
    b.tokens.clear();
    b.fed.clear();
    b.pos.clear();
    b.seq_index.clear();
    b.seqs.clear();
    b.out_rows.clear();
    rows.clear();
    bool any_fed = false;
    while (fi < feeds.size() && b.n_tokens() < opts_.max_batch_tokens) {
      const Feed& f = feeds[fi];
      const int64_t n = static_cast<int64_t>(f.tokens.size());
      const int64_t first_logit = n - f.n_logits;
      BatchSeq s;
      s.slot = f.seq;
      const int si = static_cast<int>(b.seqs.size());
      while (ti < static_cast<size_t>(n) && b.n_tokens() < opts_.max_batch_tokens) {
        if (f.n_logits > 0 && static_cast<int64_t>(ti) == first_logit) {
          if (b.n_out() + f.n_logits > opts_.max_out_rows || b.n_tokens() + f.n_logits > opts_.max_batch_tokens) break;
          rows.push_back(PassRows{fi, b.n_out()});
        }
        b.tokens.push_back(f.tokens[ti]);
        const int32_t* from = f.fed.empty() ? nullptr : f.fed[ti];
        b.fed.push_back(from);
        any_fed |= from != nullptr;
        b.pos.push_back(static_cast<int32_t>(start_len[f.seq] + static_cast<int64_t>(ti)));
        b.seq_index.push_back(si);
        if (static_cast<int64_t>(ti) >= first_logit) b.out_rows.push_back(b.n_tokens() - 1);
        ++ti;
      }
      const int64_t placed = static_cast<int64_t>(ti) - fed[f.seq];
      if (placed > 0) {
        s.kv_len = static_cast<int32_t>(start_len[f.seq] + static_cast<int64_t>(ti));
        s.blocks = kv_.Blocks(f.seq);
        b.seqs.push_back(std::move(s));
        fed[f.seq] = static_cast<int64_t>(ti);
      }
      if (ti == static_cast<size_t>(n)) {
        ++fi;
        ti = 0;
      } else {
        break;  // batch full (tokens or logits rows): the rest of this feed goes in the next pass
      }
    }
    if (!any_fed) b.fed.clear();
    std::array<int, 3> m = {backend_->Mark(), -1, -1};
    auto out = model_->Forward(b);
    if (!out.ok()) {
      rollback();
      return out.status();
    }
    if (split_timing) m[1] = backend_->Mark();
    if (on_pass && !rows.empty()) on_pass(*out, rows);
    m[2] = backend_->Mark();
    marks_.push_back(m);
    counters_.forwards += 1;
    counters_.tokens += b.n_tokens();
  }
  for (const Feed& f : feeds) {
    SPECD_RETURN_IF_ERROR(kv_.SetLength(f.seq, start_len[f.seq] + static_cast<int64_t>(f.tokens.size())));
  }
  return absl::OkStatus();
}

absl::Status Engine::Read(const void* src, void* host, size_t bytes, Timing* timing) {
  const absl::Status st = bytes > 0 ? backend_->ReadBytes(src, host, bytes) : backend_->Synchronize();
  Timing t;
  for (const auto& m : marks_) {
    if (m[1] >= 0) {
      t.forward += backend_->Seconds(m[0], m[1]);
      t.after += backend_->Seconds(m[1], m[2]);
    } else {
      t.forward += backend_->Seconds(m[0], m[2]);
    }
  }
  marks_.clear();
  backend_->ClearMarks();
  const int64_t cold_runs = backend_->ColdRuns();
  t.cold = cold_runs != cold_runs_;
  cold_runs_ = cold_runs;
  counters_.forward_seconds += t.forward + t.after;
  if (timing) *timing = t;
  return st;
}

absl::Status Engine::Run(const std::vector<Feed>& feeds, std::vector<float>* logits) {
  size_t total_rows = 0;
  for (const Feed& f : feeds) total_rows += static_cast<size_t>(std::max(f.n_logits, 0));
  const size_t base = logits->size();
  logits->resize(base + total_rows * static_cast<size_t>(vocab_size()));
  const absl::Status st = RunInto(feeds, logits->data() + base);
  if (!st.ok()) logits->resize(base);
  return st;
}

absl::Status Engine::RunInto(const std::vector<Feed>& feeds, float* logits) {
  const size_t V = static_cast<size_t>(vocab_size());
  // Feed i's rows go after the rows of the feeds before it.
  std::vector<size_t> dest(feeds.size(), 0);
  for (size_t i = 1; i < feeds.size(); ++i) dest[i] = dest[i - 1] + static_cast<size_t>(std::max(feeds[i - 1].n_logits, 0));
  std::map<int32_t, int64_t> start_len;
  for (const Feed& f : feeds) start_len[f.seq] = kv_.Length(f.seq);
  absl::Status copy;
  absl::Status st = Enqueue(feeds, [&](const float* out, const std::vector<PassRows>& rows) {
    for (const PassRows& r : rows) {
      if (!copy.ok()) return;
      copy = backend_->ReadToHost(out + static_cast<size_t>(r.row0) * V, logits + dest[r.feed] * V,
                                  static_cast<size_t>(feeds[r.feed].n_logits) * V);
    }
  });
  if (st.ok()) {
    st = copy;
    if (st.ok()) st = Read(nullptr, nullptr, 0);
    if (!st.ok()) {  // a device error after the lengths moved on: back to where they were
      for (const auto& [seq, len] : start_len) (void)kv_.Truncate(seq, len);
    }
  }
  return st;
}

}  // namespace specd
