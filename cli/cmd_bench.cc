// specd bench: prefill, decode (batch 1..16) and verify (k = 1..8) speed of a
// model file or of a named shape synthesized in place (no file needed), with
// the memory-bandwidth roofline: bytes a decode step must read (weights + KV)
// over the backend's measured copy bandwidth.
//
// Every figure is the median of --reps timed runs after a warm-up; a run is
// one Engine::Run, which ends with the logits on the host (device work done).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/numbers.h"
#include "nlohmann/json.hpp"
#include "absl/strings/str_split.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/preset_engine.h"
#include "common/engine/engine.h"
#include "common/modelgen/modelgen.h"

namespace specd::cli {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

class Bencher {
 public:
  // `rows`: the most logits rows a run returns. Like llama.cpp's output
  // buffer theirs is pinned host memory (Backend::PinHost) that the backend
  // writes as it is: a step's figure is the forward and its logits read
  // back, not the driver's staged pageable copy or a new vector's zero fill.
  Bencher(Engine* e, int reps, size_t rows)
      : e_(e), reps_(reps), rows_(rows), out_(std::make_unique_for_overwrite<float[]>(rows * e->vocab_size())) {
    const absl::Status st = e->backend()->PinHost(out_.get(), rows * e->vocab_size() * sizeof(float));
    pinned_ = st.ok();
    if (!pinned_) std::fprintf(stderr, "bench: logits buffer not pinned (%s)\n", st.ToString().c_str());
  }
  ~Bencher() {
    if (pinned_) e_->backend()->UnpinHost(out_.get());
  }

  // Prefills sequence `seq` with `n` tokens (chunked by the engine).
  absl::StatusOr<double> Prefill(int32_t seq, int n) {
    SPECD_RETURN_IF_ERROR(e_->NewSequence(seq));
    const auto t0 = std::chrono::steady_clock::now();
    SPECD_RETURN_IF_ERROR(e_->RunInto({{seq, Tokens(n, seq), 1}}, out_.get()));
    return Seconds(t0);
  }

  // Median seconds of one Run feeding `per_seq` tokens to each of `seqs`,
  // rolled back after each run so the context stays fixed.
  absl::StatusOr<double> Step(const std::vector<int32_t>& seqs, int per_seq) {
    if (seqs.size() * static_cast<size_t>(per_seq) > rows_) return absl::InternalError("bench: more rows than planned");
    std::vector<double> times;
    // Two warm-up runs: the CUDA backend runs a new shape eagerly, then
    // captures it as a graph the second time (with --reps 2 the median was
    // half a capture).
    constexpr int kWarmup = 2;
    for (int r = 0; r < reps_ + kWarmup; ++r) {
      std::vector<Engine::Feed> feeds;
      std::vector<int64_t> lens;
      for (int32_t s : seqs) {
        feeds.push_back({s, Tokens(per_seq, s + r), per_seq});
        lens.push_back(e_->Length(s));
      }
      const auto t0 = std::chrono::steady_clock::now();
      SPECD_RETURN_IF_ERROR(e_->RunInto(feeds, out_.get()));
      if (r >= kWarmup) times.push_back(Seconds(t0));
      for (size_t i = 0; i < seqs.size(); ++i) SPECD_RETURN_IF_ERROR(e_->Truncate(seqs[i], lens[i]));
    }
    return Median(times);
  }

 private:
  std::vector<int32_t> Tokens(int n, int salt) const {
    std::vector<int32_t> t(n);
    for (int i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 7919 + salt * 104729 + 13) % e_->vocab_size());
    return t;
  }
  static double Seconds(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  Engine* e_;
  int reps_;
  size_t rows_;
  std::unique_ptr<float[]> out_;  // every run's logits rows
  bool pinned_ = false;
};

}  // namespace

int Bench(const std::vector<std::string>& args) {
  Config c("specd bench");
  EngineOptions::AddFlags(&c);
  c.AddString("preset", "", "synthesize this shape preset instead of loading --model (see make-model --list-presets)");
  c.AddString("type", "Q4_K_M", "weight type or mix for --preset");
  c.AddInt("ctx", 512, "context length the decode and verify steps run at", 1, 1 << 20);
  c.AddInt("prefill", 512, "prompt tokens for the prefill measurement", 1, 1 << 20);
  c.AddString("batches", "1,2,4,8,16", "decode batch sizes (sequences per step)");
  c.AddString("verify-k", "1,2,3,4,5,6,7,8", "verify lengths k (k+1 tokens per pass)");
  c.AddInt("verify-seqs", 1, "sequences per verify pass (batched speculation: verify-seqs x (k+1) tokens)", 1, 4096);
  c.AddInt("reps", 10, "timed runs per figure (median)", 1, 100000);
  c.AddBytes("bandwidth-bytes", "1GiB", "buffer size of the copy-bandwidth measurement");
  c.AddString("json", "", "also write the results as JSON to this file");
  if (int rc = ParseOrExit(c, args); rc >= 0) return rc;
  auto batches = ParseList<int>(c.GetString("batches"), "batch", 1, 4096);
  auto ks = ParseList<int>(c.GetString("verify-k"), "verify k", 1, 64);
  if (!batches.ok()) return Fail(batches.status());
  if (!ks.ok()) return Fail(ks.status());
  const int ctx = static_cast<int>(c.GetInt("ctx"));
  const int prefill = static_cast<int>(c.GetInt("prefill"));
  const int verify_seqs = static_cast<int>(c.GetInt("verify-seqs"));
  // Sequences holding a context: the decode batches' and the verify's.
  const int max_b = std::max(*std::max_element(batches->begin(), batches->end()), verify_seqs);
  const int max_k = *std::max_element(ks->begin(), ks->end());

  EngineOptions o;
  if (c.GetString("preset").empty()) {
    auto parsed = EngineOptions::FromConfig(c);
    if (!parsed.ok()) return Fail(parsed.status());
    o = *parsed;
  } else {
    o.backend = EngineOptions::BackendFromConfig(c);
    auto kv = ParseKvType(c.GetString("kv-type"));
    if (!kv.ok()) return Fail(kv.status());
    o.kv_type = *kv;
    o.kv_block_size = static_cast<int>(c.GetInt("kv-block-size"));
    o.memory_budget = c.GetBytes("vram-budget");
  }
  // Sized for the measurements unless given: one slot per batch sequence plus
  // the prefill one, each long enough for ctx + the longest verify.
  o.max_seqs = c.IsSet("max-seqs") ? static_cast<int>(c.GetInt("max-seqs")) : max_b + 1;
  o.max_seq_len = c.IsSet("max-seq-len") ? static_cast<int>(c.GetInt("max-seq-len"))
                                          : std::max(ctx + max_k + 2, prefill + 1);
  o.max_batch_tokens = std::max<int>(static_cast<int>(c.GetInt("max-batch-tokens")), verify_seqs * (max_k + 1));
  o.max_out_rows = std::max(max_b, verify_seqs * (max_k + 1));

  std::unique_ptr<Engine> engine;
  std::string what;
  if (!c.GetString("preset").empty()) {
    auto e = CreatePresetEngine(c.GetString("preset"), c.GetString("type"), o);
    if (!e.ok()) return Fail(e.status());
    engine = std::move(*e);
    const std::string mix = c.GetString("type");
    what = c.GetString("preset") + " " + mix + " (synthetic weights)";
  } else {
    auto e = Engine::Create(o);
    if (!e.ok()) return Fail(e.status());
    engine = std::move(*e);
    what = o.model_path;
  }
  Engine& e = *engine;
  const ModelConfig& mc = e.config();
  const size_t weight_bytes = e.model().weight_stats().total_bytes;
  const size_t kv_row = RowBytes(o.kv_type, mc.head_dim);
  const double kv_bytes_per_step = static_cast<double>(ctx) * mc.n_layers * 2.0 * mc.n_kv_heads * kv_row;
  const double bw = e.backend()->MeasureCopyBandwidth(static_cast<size_t>(c.GetBytes("bandwidth-bytes")));
  std::printf("model: %s\n  %s\n  weights %.3f GB (%.2f bits/param), backend %s, kv %s, context %d\n", what.c_str(),
              mc.Describe().c_str(), weight_bytes / 1e9,
              8.0 * weight_bytes / std::max<int64_t>(1, e.model().weight_stats().n_params), e.backend()->Name().c_str(),
              TypeTraits(o.kv_type).name, ctx);
  std::printf("%s", e.ledger().ToString().c_str());
  std::printf("copy bandwidth (read+write): %.1f GB/s\n\n", bw / 1e9);

  Bencher b(&e, static_cast<int>(c.GetInt("reps")), static_cast<size_t>(o.max_out_rows));
  nlohmann::ordered_json js = {{"model", what}, {"backend", e.backend()->Name()}, {"weight_bytes", weight_bytes},
                                {"copy_bandwidth", bw}, {"ctx", ctx}};
  // Prefill: the first one pays one-time costs (cuBLAS set-up, kernel
  // loading, scratch growth), so the figure is a second one (llama-bench
  // also warms up); the first is shown apart.
  auto pf_cold = b.Prefill(0, prefill);
  if (!pf_cold.ok()) return Fail(pf_cold.status());
  e.Release(0);
  auto pf = b.Prefill(0, prefill);
  if (!pf.ok()) return Fail(pf.status());
  e.Release(0);
  std::printf("prefill: %d tokens in %.3f s = %.1f tok/s (the first prefill: %.3f s)\n", prefill, *pf,
              prefill / *pf, *pf_cold);
  js["prefill_tokens"] = prefill;
  js["prefill_seconds"] = *pf;
  js["prefill_cold_seconds"] = *pf_cold;
  // Contexts for the decode batches.
  for (int s = 1; s <= max_b; ++s) {
    auto st = b.Prefill(s, ctx);
    if (!st.ok()) return Fail(st.status());
  }
  double decode1 = 0, decode_vs = 0;  // step seconds at batch 1 and at verify-seqs sequences
  std::printf("\ndecode at context %d:\n  %5s %12s %14s %14s %10s\n", ctx, "batch", "step ms", "tok/s (all)",
              "tok/s (each)", "roofline");
  js["decode"] = nlohmann::ordered_json::array();
  for (size_t i = 0; i < batches->size(); ++i) {
    const int n = (*batches)[i];
    std::vector<int32_t> seqs;
    for (int s = 1; s <= n; ++s) seqs.push_back(s);
    auto t = b.Step(seqs, 1);
    if (!t.ok()) return Fail(t.status());
    if (n == 1) decode1 = *t;
    if (n == verify_seqs) decode_vs = *t;
    // Bytes one step must read: all weights once, and each sequence's KV.
    const double ideal = bw > 0 ? (weight_bytes + n * kv_bytes_per_step) / bw : 0;
    std::printf("  %5d %12.3f %14.1f %14.2f %9.1f%%\n", n, *t * 1e3, n / *t, 1 / *t, ideal > 0 ? 100 * ideal / *t : 0.0);
    js["decode"].push_back({{"batch", n}, {"step_seconds", *t}, {"roofline_seconds", ideal}});
  }
  // A batched verify against the decode step of as many sequences, when that batch was measured.
  const bool per_batch = verify_seqs > 1 && decode_vs > 0;
  const double step = per_batch ? decode_vs : decode1;
  std::printf("\nverify at context %d (k proposals + 1, one pass, %d sequence%s):\n  %3s %12s %16s\n", ctx,
              verify_seqs, verify_seqs > 1 ? "s" : "", "k", "pass ms", per_batch ? "x batch step" : "x decode step");
  js["verify_seqs"] = verify_seqs;
  js["verify"] = nlohmann::ordered_json::array();
  std::vector<int32_t> vseqs;
  for (int s = 1; s <= verify_seqs; ++s) vseqs.push_back(s);
  for (size_t i = 0; i < ks->size(); ++i) {
    const int k = (*ks)[i];
    auto t = b.Step(vseqs, k + 1);
    if (!t.ok()) return Fail(t.status());
    std::printf("  %3d %12.3f %16.2f\n", k, *t * 1e3, step > 0 ? *t / step : 0.0);
    js["verify"].push_back({{"k", k}, {"pass_seconds", *t}});
  }
  if (decode1 > 0 && bw > 0) {
    const double ideal = (weight_bytes + kv_bytes_per_step) / bw;
    std::printf("\nbatch-1 decode: %.2f tok/s; roofline %.2f tok/s (%.3f GB/token over %.1f GB/s): %.1f%% of it\n",
                1 / decode1, 1 / ideal, (weight_bytes + kv_bytes_per_step) / 1e9, bw / 1e9, 100 * ideal / decode1);
  }
  if (!c.GetString("json").empty()) std::ofstream(c.GetString("json")) << js.dump() << "\n";
  return 0;
}

}  // namespace specd::cli
