// specd make-model: generated GGUF models (single, target/draft pair, or a
// draft derived from an existing target).
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/cli_util.h"
#include "common/modelgen/modelgen.h"

namespace specd::cli {

int MakeModel(const std::vector<std::string>& args) {
  Config c("specd make-model");
  c.AddString("preset", "tiny", "shape preset (see --list-presets)");
  c.AddBool("list-presets", false, "list the shape presets and exit");
  c.AddString("arch", "", "override: llama, qwen2 or qwen3");
  c.AddInt("layers", 0, "override: layer count", 0, 1024);
  c.AddInt("d-model", 0, "override: model width", 0, 1 << 17);
  c.AddInt("heads", 0, "override: query heads", 0, 4096);
  c.AddInt("kv-heads", 0, "override: key/value heads", 0, 4096);
  c.AddInt("head-dim", 0, "override: head dimension", 0, 1024);
  c.AddInt("ffn", 0, "override: FFN width", 0, 1 << 19);
  c.AddInt("vocab-size", 0, "override: vocabulary size", 0, 1 << 20);
  c.AddInt("ctx", 0, "override: context length", 0, 1 << 24);
  c.AddString("type", "F32", "weight type or mix (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K Q4_K_M Q4_K_S Q5_K_M)");
  c.AddString("vocab", "gpt2", "vocabulary kind: gpt2 (byte-level BPE) or llama (SentencePiece BPE)");
  c.AddInt("seed", 1, "weights seed");
  c.AddString("fill", "gaussian",
              "how weight matrices are made: 'gaussian' (a Gaussian sample quantized by ggml's reference "
              "quantizers: the values the accuracy tests compare against; ~100 ns/weight) or 'blocks' (random "
              "valid quantized blocks written directly, same types and deviations; ~2 ns/weight: for multi-GB "
              "speed-run models, whose values do not matter)");
  c.AddBool("sync", true,
            "fsync each file before renaming it into place; false leaves writing back to the kernel (a crash "
            "may then leave a partial file under the final name: for scratch models, where the disk would "
            "otherwise set the pace)");
  c.AddDouble("residual-gain", GenOptions{}.residual_gain, "scale of each layer's residual update (lower: drafts agree more)", 0.0, 100.0);
  c.AddString("out", "", "output file, or output directory with --pair");
  c.AddBool("pair", false, "write DIR/target.gguf and a derived DIR/draft.gguf");
  c.AddString("derive-from", "", "derive a draft from this target file instead of generating");
  c.AddInt("draft-layers", 0, "layers the derived draft keeps (0: half of the target's)", 0, 1024);
  c.AddString("draft-type", "", "weight type of the derived draft (empty: the target's)");
  c.AddString("draft-preset", "",
              "with --pair: generate the draft from this shape preset instead of deriving it (same vocabulary; "
              "give --successor-gain so that it agrees with the target)");
  c.AddDouble("successor-gain", 0.0,
              "> 0: the head maps each token to a successor token (a vocabulary permutation) this many logits above "
              "its random ones, so models of any shapes made with the same --successor-seed agree (higher: more)",
              0.0, 1000.0);
  c.AddInt("successor-seed", 1, "the successor permutation's seed (the same for a target and its draft)");
  if (int rc = ParseOrExit(c, args); rc >= 0) return rc;
  if (c.GetBool("list-presets")) {
    for (const auto& p : PresetNames()) std::printf("%s\n", p.c_str());
    return 0;
  }
  const std::string out = c.GetString("out");
  if (out.empty()) return Fail("--out is required");

  if (!c.GetString("derive-from").empty()) {
    DeriveOptions d;
    d.layers = static_cast<int>(c.GetInt("draft-layers"));
    d.weight_type = c.GetString("draft-type");
    d.sync = c.GetBool("sync");
    if (auto st = DeriveDraft(c.GetString("derive-from"), d, out); !st.ok()) return Fail(st);
    std::printf("wrote %s (draft derived from %s)\n", out.c_str(), c.GetString("derive-from").c_str());
    return 0;
  }

  auto shape = PresetShape(c.GetString("preset"));
  if (!shape.ok()) return Fail(shape.status());
  ModelShape s = *shape;
  if (!c.GetString("arch").empty()) s.arch = c.GetString("arch");
  auto over = [&](const char* k, int* f) {
    if (c.GetInt(k) > 0) *f = static_cast<int>(c.GetInt(k));
  };
  over("layers", &s.n_layers);
  over("d-model", &s.d_model);
  over("heads", &s.n_heads);
  over("kv-heads", &s.n_kv_heads);
  over("head-dim", &s.head_dim);
  over("ffn", &s.ffn_dim);
  over("vocab-size", &s.vocab_size);
  over("ctx", &s.ctx);
  GenOptions g;
  g.shape = s;
  g.weight_type = c.GetString("type");
  g.vocab = c.GetString("vocab");
  g.seed = static_cast<uint64_t>(c.GetInt("seed"));
  g.residual_gain = static_cast<float>(c.GetDouble("residual-gain"));
  g.successor_gain = static_cast<float>(c.GetDouble("successor-gain"));
  g.successor_seed = static_cast<uint64_t>(c.GetInt("successor-seed"));
  auto fill = ParseWeightFill(c.GetString("fill"));
  if (!fill.ok()) return Fail(fill.status());
  g.fill = *fill;
  g.sync = c.GetBool("sync");
  std::string target = out;
  if (c.GetBool("pair")) {
    std::error_code ec;
    std::filesystem::create_directories(out, ec);
    target = out + "/target.gguf";
  }
  g.name = "specd-" + c.GetString("preset") + "-" + g.weight_type;
  std::printf("generating %s (%s, %s, fill %s)\n", target.c_str(), s.Describe().c_str(), g.weight_type.c_str(),
              WeightFillName(g.fill));
  if (g.fill == WeightFill::kGaussian && s.ParamCount() > int64_t{2000000000})
    std::printf("note: --fill blocks makes a model this size ~50x faster when the weights' values do not matter\n");
  if (auto st = GenerateModel(g, target); !st.ok()) return Fail(st);
  if (c.GetBool("pair") && !c.GetString("draft-preset").empty()) {
    // An independent draft: its own shape and weights, the target's vocabulary
    // and successor structure.
    auto ds = PresetShape(c.GetString("draft-preset"));
    if (!ds.ok()) return Fail(ds.status());
    GenOptions dg = g;
    dg.shape = *ds;
    dg.shape.vocab_size = s.vocab_size;
    dg.shape.ctx = s.ctx;
    if (!c.GetString("draft-type").empty()) dg.weight_type = c.GetString("draft-type");
    dg.seed = g.seed + 1;
    dg.name = g.name + "-draft-" + c.GetString("draft-preset");
    if (g.successor_gain <= 0)
      std::printf("note: without --successor-gain an independent draft almost never agrees with the target\n");
    const std::string draft = out + "/draft.gguf";
    std::printf("generating %s (%s, %s)\n", draft.c_str(), dg.shape.Describe().c_str(), dg.weight_type.c_str());
    if (auto st = GenerateModel(dg, draft); !st.ok()) return Fail(st);
    std::printf("wrote %s and %s\n", target.c_str(), draft.c_str());
  } else if (c.GetBool("pair")) {
    DeriveOptions d;
    d.layers = c.GetInt("draft-layers") > 0 ? static_cast<int>(c.GetInt("draft-layers")) : std::max(1, s.n_layers / 2);
    d.weight_type = c.GetString("draft-type");
    d.name = g.name + "-draft";
    d.sync = g.sync;
    const std::string draft = out + "/draft.gguf";
    if (auto st = DeriveDraft(target, d, draft); !st.ok()) return Fail(st);
    std::printf("wrote %s and %s (draft: %d of %d layers%s%s)\n", target.c_str(), draft.c_str(), d.layers, s.n_layers,
                d.weight_type.empty() ? "" : ", ", d.weight_type.c_str());
  } else {
    std::printf("wrote %s\n", target.c_str());
  }
  return 0;
}

}  // namespace specd::cli
