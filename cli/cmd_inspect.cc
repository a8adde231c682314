// specd inspect FILE.gguf: metadata, tensor table, parameter count, bytes by
// type and the memory a run needs for a given context and batch.
#include <cstdio>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "common/engine/engine.h"
#include "common/gguf/file_type.h"
#include "common/gguf/gguf.h"
#include "common/model/model.h"
#include "common/tokenizer/tokenizer.h"

namespace specd::cli {

int Inspect(const std::vector<std::string>& args) {
  Config c("specd inspect");
  c.AddInt("ctx", 4096, "context length per sequence for the memory estimate", 1, 1 << 24);
  c.AddInt("batch", 1, "sequences for the memory estimate", 1, 4096);
  c.AddInt("max-batch-tokens", EngineOptions::kDefaultMaxBatchTokens,
           "tokens per forward pass for the activation estimate", 1, 1 << 16);
  c.AddBool("tensors", true, "print the tensor table");
  c.AddInt("max-array", 8, "array items to show per metadata value", 0, 1 << 20);
  if (int rc = ParseOrExit(c, args); rc >= 0) return rc;
  if (c.positional().size() != 1) return Fail("usage: specd inspect FILE.gguf [--ctx N] [--batch N]");
  const std::string path = c.positional()[0];
  auto f = GgufFile::Open(path);
  if (!f.ok()) return Fail(f.status());
  const GgufFile& g = **f;
  std::printf("file: %s\nversion: %u  alignment: %u  size: %s  tensors: %zu  metadata keys: %zu\n\n", path.c_str(),
              g.version(), g.alignment(), Config::FormatBytes(static_cast<int64_t>(g.file_size())).c_str(),
              g.tensors().size(), g.metadata().size());
  std::printf("metadata:\n");
  for (const auto& [k, v] : g.metadata()) {
    std::printf("  %-44s %-8s %s\n", k.c_str(), std::string(GgufValueTypeName(v.type)).c_str(),
                v.ToString(static_cast<size_t>(c.GetInt("max-array"))).c_str());
  }
  if (auto ft = FileTypeOf(g); ft.ok()) {
    std::printf("\nfile type: %s (llama_ftype %u)%s\n", ft->name.c_str(), ft->ftype,
                ft->legacy ? "; stored as a string by an older specd, which llama.cpp refuses: "
                             "`specd make-model --derive-from FILE --out NEW` rewrites it"
                           : "");
  } else if (!absl::IsNotFound(ft.status())) {
    std::printf("\nfile type: %s\n", std::string(ft.status().message()).c_str());
  }
  if (c.GetBool("tensors")) {
    std::printf("\ntensors:\n  %-36s %-6s %-22s %12s %14s\n", "name", "type", "shape", "elements", "bytes");
    for (const auto& t : g.tensors()) {
      std::string shape = "[";
      for (size_t i = 0; i < t.ne.size(); ++i) shape += (i ? ", " : "") + std::to_string(t.ne[i]);
      shape += "]";
      std::printf("  %-36s %-6s %-22s %12lld %14llu\n", t.name.c_str(), std::string(TypeName(t.type)).c_str(),
                  shape.c_str(), static_cast<long long>(t.nelements()), static_cast<unsigned long long>(t.nbytes));
    }
  }
  const WeightStats ws = Model::ComputeWeightStats(g);
  std::printf("\nparameters: %lld (%.3f B)   weight bytes: %s (%.2f bits/weight)\n", static_cast<long long>(ws.n_params),
              ws.n_params / 1e9, Config::FormatBytes(static_cast<int64_t>(ws.total_bytes)).c_str(),
              ws.n_params ? 8.0 * ws.total_bytes / ws.n_params : 0.0);
  std::printf("bytes by type:\n");
  for (const auto& [t, b] : ws.bytes_by_type) {
    std::printf("  %-6s %14s  (%.1f%%)\n", std::string(TypeName(t)).c_str(), Config::FormatBytes(static_cast<int64_t>(b)).c_str(),
                100.0 * b / std::max<size_t>(1, ws.total_bytes));
  }
  auto cfg = ModelConfig::FromGguf(g);
  if (!cfg.ok()) {
    std::printf("\nmodel: not runnable by specd: %s\n", std::string(cfg.status().message()).c_str());
    return 0;
  }
  std::printf("\nmodel: %s\n", cfg->Describe().c_str());
  auto tok = Tokenizer::FromGguf(g);
  if (tok.ok()) {
    std::printf("tokenizer: %s, %d tokens, bos=%d eos=%d, chat template: %s\n  vocab digest: %s\n",
                std::string((*tok)->model()).c_str(), (*tok)->vocab_size(), (*tok)->bos(), (*tok)->eos(),
                (*tok)->chat_template().empty() ? "none" : "yes", (*tok)->VocabDigest().c_str());
  } else {
    std::printf("tokenizer: unusable: %s\n", std::string(tok.status().message()).c_str());
  }
  std::printf("\nmemory for %lld sequence(s) x %lld positions (max-batch-tokens %lld):\n",
              static_cast<long long>(c.GetInt("batch")), static_cast<long long>(c.GetInt("ctx")),
              static_cast<long long>(c.GetInt("max-batch-tokens")));
  for (const char* kv : {"f16", "q8_0", "f32"}) {
    EngineOptions o;
    o.max_seqs = static_cast<int>(c.GetInt("batch"));
    o.max_seq_len = static_cast<int>(c.GetInt("ctx"));
    o.max_batch_tokens = static_cast<int>(c.GetInt("max-batch-tokens"));
    o.kv_type = *ParseKvType(kv);
    auto plan = Engine::Plan(g, o, -1);
    if (!plan.ok()) {
      std::printf("  kv %-5s: %s\n", kv, std::string(plan.status().message()).c_str());
      continue;
    }
    std::printf("  kv %-5s: weights %s + kv %s + activations %s = %s\n", kv,
                Config::FormatBytes(static_cast<int64_t>(plan->weights)).c_str(),
                Config::FormatBytes(static_cast<int64_t>(plan->kv_pool)).c_str(),
                Config::FormatBytes(static_cast<int64_t>(plan->activations)).c_str(),
                Config::FormatBytes(static_cast<int64_t>(plan->total())).c_str());
  }
  return 0;
}

}  // namespace specd::cli
