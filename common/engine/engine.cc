#include "common/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <sstream>

#include "absl/strings/ascii.h"
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
  c->AddInt(p + "device", 0, "CUDA device ordinal", 0, 64);
  c->AddInt(p + "max-seqs", 8, "sequences resident at once (KV slots)", 1, 4096);
  c->AddInt(p + "max-seq-len", 4096, "positions per sequence: prompt + output + draft lookahead", 16, 1 << 20);
  c->AddInt(p + "max-batch-tokens", 256, "tokens per forward pass (prefill chunk size)", 1, 1 << 16);
  c->AddString(p + "kv-type", "f16", "KV cache element type: f32, f16 or q8_0");
  c->AddInt(p + "kv-block-size", 16, "positions per KV block", 1, 1024);
  c->AddInt(p + "kv-blocks", 0, "KV pool size in blocks (0: max-seqs x max-seq-len)", 0, 1ll << 32);
  c->AddBytes(p + "vram-budget", "auto",
              "memory for weights + KV + activations + exchange buffers (auto: the device's free memory)");
}

absl::StatusOr<EngineOptions> EngineOptions::FromConfig(const Config& c, const std::string& p) {
  EngineOptions o;
  o.model_path = c.GetString(p + "model");
  o.backend.name = c.GetString(p + "backend");
  o.backend.threads = static_cast<int>(c.GetInt(p + "threads"));
  o.backend.device = static_cast<int>(c.GetInt(p + "device"));
  o.max_seqs = static_cast<int>(c.GetInt(p + "max-seqs"));
  o.max_seq_len = static_cast<int>(c.GetInt(p + "max-seq-len"));
  o.max_batch_tokens = static_cast<int>(c.GetInt(p + "max-batch-tokens"));
  SPECD_ASSIGN_OR_RETURN(o.kv_type, ParseKvType(c.GetString(p + "kv-type")));
  o.kv_block_size = static_cast<int>(c.GetInt(p + "kv-block-size"));
  o.kv_blocks = c.GetInt(p + "kv-blocks");
  o.memory_budget = c.GetBytes(p + "vram-budget");
  if (o.model_path.empty()) return absl::InvalidArgumentError("--" + p + "model is required");
  return o;
}

std::string MemoryLedger::ToString() const {
  std::ostringstream os;
  auto row = [&](const char* name, size_t b) {
    os << "  " << name << std::string(14 - std::string(name).size(), ' ') << Config::FormatBytes(static_cast<int64_t>(b))
       << "\n";
  };
  os << "memory ledger (" << device << "):\n";
  row("weights", weights);
  row("kv pool", kv_pool);
  row("activations", activations);
  row("exchange", exchange);
  row("runtime", runtime);
  row("total", total());
  os << "  budget        " << (budget < 0 ? std::string("unbounded") : Config::FormatBytes(budget))
     << (fits() ? "  (fits)" : "  (DOES NOT FIT)") << "\n";
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
  // context of the process (~500 MiB), the cuBLAS workspace, the prefill
  // dequantization tile, attention/matmul scratch and arena padding (~200
  // MiB measured on an H200).
  if (o.backend.name == "cuda") l.runtime = 768ull << 20;
  l.budget = o.memory_budget >= 0 ? o.memory_budget : device_free;
  return l;
}

namespace {
absl::Status RefuseIfOver(const MemoryLedger& l, const std::string& what) {
  if (l.fits()) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      what, ": the memory plan does not fit the budget; refusing to start (nothing is offloaded).\n", l.ToString(),
      "Lower --max-seqs / --max-seq-len / --kv-blocks, use --kv-type q8_0, or raise --vram-budget."));
}
absl::Status CheckLimits(const EngineOptions& o) {
  if (o.max_seqs < 1 || o.max_seq_len < 1 || o.max_batch_tokens < 1 || o.kv_block_size < 1)
    return absl::InvalidArgumentError("engine limits must be positive");
  return absl::OkStatus();
}
}  // namespace

absl::Status Engine::Finish(const ModelConfig& cfg) {
  const KvLayout kv = KvLayoutFor(cfg, opts_);
  SPECD_RETURN_IF_ERROR(backend_->InitKv(kv));
  kv_ = KvBlockManager(kv.n_blocks, kv.block_size);
  return absl::OkStatus();
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
  SPECD_ASSIGN_OR_RETURN(e->backend_, CreateBackend(o.backend));
  SPECD_ASSIGN_OR_RETURN(e->ledger_, Plan(*e->file_, e->opts_, static_cast<int64_t>(e->backend_->AvailableMemory())));
  SPECD_RETURN_IF_ERROR(RefuseIfOver(e->ledger_, o.model_path));
  SPECD_ASSIGN_OR_RETURN(e->model_, Model::Load(*e->file_, e->backend_.get(), e->opts_.max_batch_tokens,
                                                e->opts_.max_out_rows));
  SPECD_RETURN_IF_ERROR(e->Finish(cfg));
  return e;
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::CreateSynthetic(const ModelConfig& cfg, const Model::TypeFor& type_for,
                                                                const EngineOptions& o) {
  SPECD_RETURN_IF_ERROR(CheckLimits(o));
  std::unique_ptr<Engine> e(new Engine());
  e->opts_ = o;
  e->opts_.max_out_rows = std::min(o.max_out_rows, o.max_batch_tokens);
  SPECD_ASSIGN_OR_RETURN(e->backend_, CreateBackend(o.backend));
  // Weight bytes are known only once the types are assigned; plan with the
  // KV and activations first, then check again with the weights.
  SPECD_ASSIGN_OR_RETURN(e->ledger_, PlanFor(cfg, 0, e->opts_, static_cast<int64_t>(e->backend_->AvailableMemory())));
  SPECD_RETURN_IF_ERROR(RefuseIfOver(e->ledger_, "synthetic model"));
  SPECD_ASSIGN_OR_RETURN(e->model_, Model::CreateSynthetic(cfg, type_for, e->backend_.get(), e->opts_.max_batch_tokens,
                                                           e->opts_.max_out_rows));
  e->ledger_.weights = e->model_->weight_stats().total_bytes;
  SPECD_RETURN_IF_ERROR(e->Finish(cfg));
  return e;
}

Engine::~Engine() = default;

absl::Status Engine::NewSequence(int32_t id) {
  if (active_sequences() >= opts_.max_seqs)
    return absl::ResourceExhaustedError(absl::StrCat("all ", opts_.max_seqs, " sequence slots are in use"));
  return kv_.Create(id);
}

void Engine::Release(int32_t id) { kv_.Release(id); }

absl::Status Engine::Truncate(int32_t id, int64_t len) { return kv_.Truncate(id, len); }

absl::Status Engine::Run(const std::vector<Feed>& feeds, std::vector<float>* logits) {
  const int V = vocab_size();
  // Validate everything first, so that a bad feed changes nothing.
  std::map<int32_t, int64_t> start_len;
  size_t total_rows = 0;
  for (const Feed& f : feeds) {
    if (!kv_.Exists(f.seq)) return absl::NotFoundError(absl::StrCat("sequence ", f.seq, " does not exist"));
    if (start_len.count(f.seq)) return absl::InvalidArgumentError(absl::StrCat("sequence ", f.seq, " fed twice in one run"));
    if (f.tokens.empty()) return absl::InvalidArgumentError("empty feed");
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
    total_rows += static_cast<size_t>(f.n_logits);
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
  const size_t base = logits->size();
  logits->resize(base + total_rows * V);

  // Pack tokens into forward passes: at most max_batch_tokens tokens and
  // max_out_rows logits rows each. A feed may span several passes (chunked prefill).
  size_t fi = 0, ti = 0, row_cursor = 0;
  std::map<int32_t, int64_t> fed;  // tokens of each feed already placed
  for (const Feed& f : feeds) fed[f.seq] = 0;
  std::vector<size_t> row_dest;
  while (fi < feeds.size()) {
    Batch b;
    row_dest.clear();
    int outs = 0;
    while (fi < feeds.size() && b.n_tokens() < opts_.max_batch_tokens) {
      const Feed& f = feeds[fi];
      const int64_t n = static_cast<int64_t>(f.tokens.size());
      const int64_t first_logit = n - f.n_logits;
      BatchSeq s;
      s.slot = f.seq;
      const int si = static_cast<int>(b.seqs.size());
      while (ti < static_cast<size_t>(n) && b.n_tokens() < opts_.max_batch_tokens) {
        const bool want = static_cast<int64_t>(ti) >= first_logit;
        if (want && outs >= opts_.max_out_rows) break;
        b.tokens.push_back(f.tokens[ti]);
        b.pos.push_back(static_cast<int32_t>(start_len[f.seq] + static_cast<int64_t>(ti)));
        b.seq_index.push_back(si);
        if (want) {
          b.out_rows.push_back(b.n_tokens() - 1);
          row_dest.push_back(row_cursor++);
          ++outs;
        }
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
    const auto t0 = std::chrono::steady_clock::now();
    auto out = model_->Forward(b);
    if (!out.ok()) {
      rollback();
      logits->resize(base);
      return out.status();
    }
    if (b.n_out() > 0) {
      // Rows come back in batch order; they were allotted consecutive destinations.
      float* dst = logits->data() + base + row_dest.front() * V;
      absl::Status st = backend_->ReadToHost(*out, dst, static_cast<size_t>(b.n_out()) * V);
      if (!st.ok()) {
        rollback();
        logits->resize(base);
        return st;
      }
    } else {
      SPECD_RETURN_IF_ERROR(backend_->Synchronize());
    }
    counters_.forwards += 1;
    counters_.tokens += b.n_tokens();
    counters_.forward_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  for (const Feed& f : feeds) {
    SPECD_RETURN_IF_ERROR(kv_.SetLength(f.seq, start_len[f.seq] + static_cast<int64_t>(f.tokens.size())));
  }
  return absl::OkStatus();
}

}  // namespace specd
