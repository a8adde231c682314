// specd plan: the memory ledger of a target + draft deployment against one
// budget for the device, from files or named shapes, without a GPU (pure
// arithmetic): what the two workers would hold together, with the tensors a
// draft maps from its target (files only: same name, type, shape and
// SHA-256) shown apart. With --allocate it also builds both models on the
// backend in this process (synthetic weights for shapes; the draft maps the
// target's shared tensors) and reports what the device really gave up.
#include <cstdio>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/preset_engine.h"
#include "common/engine/engine.h"
#include "common/memory/weight_manifest.h"
#include "common/modelgen/modelgen.h"
#include "common/shm/exchange.h"

namespace specd::cli {
namespace {

struct Side {
  std::string file, preset, type;
  bool present() const { return !file.empty() || !preset.empty(); }
  std::string What() const { return file.empty() ? preset + " " + type : file; }
};

absl::StatusOr<MemoryLedger> PlanSide(const Side& s, const EngineOptions& o, int64_t free_mem) {
  if (!s.file.empty()) {
    SPECD_ASSIGN_OR_RETURN(auto f, GgufFile::Open(s.file));
    return Engine::Plan(*f, o, free_mem);
  }
  return PlanPreset(s.preset, s.type, o, free_mem);
}

absl::StatusOr<int> VocabOf(const Side& s) {
  if (!s.file.empty()) {
    SPECD_ASSIGN_OR_RETURN(auto f, GgufFile::Open(s.file));
    SPECD_ASSIGN_OR_RETURN(ModelConfig cfg, ModelConfig::FromGguf(*f));
    return cfg.vocab_size;
  }
  SPECD_ASSIGN_OR_RETURN(ModelShape shape, PresetShape(s.preset));
  return shape.vocab_size;
}

// The tensors a draft file would map from its target file (the rule the
// workers apply: common/memory/weight_manifest.h).
absl::StatusOr<SharePlan> SharedWithTarget(const Side& target, const Side& draft) {
  if (target.file.empty() || draft.file.empty()) return SharePlan{};  // shapes: no bytes to compare
  SPECD_ASSIGN_OR_RETURN(auto tf, GgufFile::Open(target.file));
  SPECD_ASSIGN_OR_RETURN(auto df, GgufFile::Open(draft.file));
  WeightExport x;
  x.tensors = DigestTensors(*tf, 0);
  for (const auto& t : tf->tensors()) x.bytes += t.nbytes;  // offsets 0: only identity matters here
  return MatchTensors(*df, x, 0);
}

absl::StatusOr<std::unique_ptr<Engine>> BuildSide(const Side& s, EngineOptions o) {
  if (!s.file.empty()) {
    o.model_path = s.file;
    return Engine::Create(o);
  }
  return CreatePresetEngine(s.preset, s.type, o);
}

}  // namespace

int Plan(const std::vector<std::string>& args) {
  Config c("specd plan");
  c.AddString("target", "", "target GGUF file");
  c.AddString("target-preset", "", "or: target shape preset (synthetic)");
  c.AddString("target-type", "Q4_K_M", "weight type/mix for --target-preset");
  c.AddString("draft", "", "draft GGUF file");
  c.AddString("draft-preset", "", "or: draft shape preset (synthetic)");
  c.AddString("draft-type", "Q4_K_M", "weight type/mix for --draft-preset");
  c.AddString("backend", "cuda", "backend the plan is for: cpu or cuda");
  c.AddString("kv-type", "q8_0", "KV cache type: f32, f16, q8_0");
  c.AddInt("max-seqs", 6, "sequences resident at once", 1, 4096);
  c.AddInt("max-seq-len", 4096, "positions per sequence", 16, 1 << 20);
  c.AddInt("max-batch-tokens", EngineOptions::kDefaultMaxBatchTokens, "tokens per forward pass", 1, 1 << 16);
  c.AddInt("k-max", 8, "longest proposal (sizes the exchange buffer)", 1, 64);
  c.AddBytes("vram-budget", "24GiB", "memory both models must fit in together");
  c.AddString("share-weights", "auto",
              "auto: the draft maps the tensors it holds identically to the target's (files; cuda), as the workers "
              "do with --share-weights auto; off: an own copy");
  c.AddBool("allocate", false, "also build both models on the backend and measure the memory used");
  if (int rc = ParseOrExit(c, args); rc >= 0) return rc;
  const Side target{c.GetString("target"), c.GetString("target-preset"), c.GetString("target-type")};
  const Side draft{c.GetString("draft"), c.GetString("draft-preset"), c.GetString("draft-type")};
  if (!target.present()) return Fail("give --target FILE or --target-preset NAME");
  EngineOptions o;
  o.backend.name = c.GetString("backend");
  auto kv = ParseKvType(c.GetString("kv-type"));
  if (!kv.ok()) return Fail(kv.status());
  o.kv_type = *kv;
  o.max_seqs = static_cast<int>(c.GetInt("max-seqs"));
  o.max_seq_len = static_cast<int>(c.GetInt("max-seq-len"));
  o.max_batch_tokens = static_cast<int>(c.GetInt("max-batch-tokens"));
  const int64_t budget = c.GetBytes("vram-budget");
  o.memory_budget = budget;
  auto share = EngineOptions::ShareWeightsFromConfig(c, EngineOptions::ShareWeights::kExport);
  if (!share.ok()) return Fail(share.status());
  const bool sharing = *share != EngineOptions::ShareWeights::kOff && o.backend.name != "cpu";

  auto tl = PlanSide(target, o, budget);
  if (!tl.ok()) return Fail(tl.status());
  std::printf("target: %s\n%s", target.What().c_str(), tl->ToString().c_str());
  size_t total = tl->total();
  if (draft.present()) {
    EngineOptions d = o;
    auto vocab = VocabOf(draft);
    if (!vocab.ok()) return Fail(vocab.status());
    // The draft worker owns the exchange buffer: k_max x vocab floats per slot.
    d.exchange_bytes =
        static_cast<int64_t>(ExchangeBuffer::BytesFor(d.max_seqs, static_cast<int>(c.GetInt("k-max")), *vocab));
    auto dl = PlanSide(draft, d, budget);
    if (!dl.ok()) return Fail(dl.status());
    if (sharing) {
      auto sp = SharedWithTarget(target, draft);
      if (!sp.ok()) return Fail(sp.status());
      if (sp->bytes > 0) {
        dl->ShareWeights(sp->bytes, 0);
        std::printf("\ndraft maps from the target: %s\n", sp->Describe().c_str());
      }
    }
    dl->others = tl->total();  // one budget for the device: the target holds its part
    dl->others_detail = {"the target above"};
    std::printf("\ndraft: %s\n%s", draft.What().c_str(), dl->ToString().c_str());
    total += dl->total();
  }
  const bool fits = budget < 0 || total <= static_cast<size_t>(budget);
  std::printf("\ntogether: %s of %s  -> %s\n", Config::FormatBytes(static_cast<int64_t>(total)).c_str(),
              Config::FormatBytes(budget).c_str(), fits ? "FITS" : "DOES NOT FIT");
  if (!c.GetBool("allocate")) return fits ? 0 : 1;

  // Build both on the device, each within what is left of the budget.
  auto probe = CreateBackend(o.backend);
  if (!probe.ok()) return Fail(probe.status());
  const int64_t free0 = static_cast<int64_t>((*probe)->AvailableMemory());
  probe->reset();
  const int64_t free_start = free0;
  // Both in this process, each registered on the device (roles plan:*),
  // so the draft's check counts the target's share of the one budget.
  EngineOptions to = o;
  to.role = "plan:target";
  if (sharing) to.share_weights = EngineOptions::ShareWeights::kExport;
  auto te = BuildSide(target, to);
  if (!te.ok()) return Fail(te.status());
  const int64_t used_t = free_start - static_cast<int64_t>((*te)->backend()->AvailableMemory());
  std::printf("\nallocated target: device memory used %s (planned %s)\n", Config::FormatBytes(used_t).c_str(),
              Config::FormatBytes(static_cast<int64_t>(tl->total())).c_str());
  int64_t used = used_t;
  if (draft.present()) {
    EngineOptions dopt = o;
    dopt.role = "plan:draft";
    if (sharing) dopt.share_weights = EngineOptions::ShareWeights::kImport;
    auto de = BuildSide(draft, dopt);
    if (!de.ok()) return Fail(de.status());
    used = free_start - static_cast<int64_t>((*de)->backend()->AvailableMemory());
    std::printf("allocated draft: device memory used %s (%s)\n", Config::FormatBytes(used - used_t).c_str(),
                (*de)->weight_sharing().c_str());
  }
  const bool ok = used <= budget;
  std::printf("allocated together: %s of %s -> %s\n", Config::FormatBytes(used).c_str(),
              Config::FormatBytes(budget).c_str(), ok ? "FITS" : "DOES NOT FIT");
  return ok ? 0 : 1;
}

}  // namespace specd::cli
