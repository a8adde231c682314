// specd bench-spec: target-only vs fixed k vs adaptive speculation on one
// target/draft pair, in process, one request at a time, over a workload of
// prompts (the built-in mixed one: code the pycode pair predicts well, prose
// and noise it does not; or --prompt-file). The call costs are calibrated
// (on one prompt, then refined by one unrecorded pass of the fixed modes over
// the workload) and frozen; each adaptive run starts from a copy and keeps
// measuring, as the coordinator does (--live-costs=false: it uses the frozen
// table, so its choices are the same run after run). Modes run interleaved
// --repeats times and the median run is reported. --costs replays a table
// measured elsewhere instead (e.g. the H200's, on this machine's CPU): the
// "model tok/s" column then says what each mode's choices would take there.
// Greedy outputs are checked to be identical in every mode (lossless).
// --proposer ngram measures n-gram (prompt-lookup) proposals without a draft
// model, ngram+draft the chain of both; --chat renders each prompt as a
// user message (chat models, e.g. the rewrite workload of tests/gpu/ngram_bench.sh).
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "common/api/request.h"
#include "common/backend/cuda/cuda_backend.h"
#include "common/engine/spec_bench.h"
#include "common/util/log.h"

namespace specd::cli {
namespace {

struct TextPrompt {
  std::string label, text;
};

// Python the pycode pair was trained on, and text it was not.
const TextPrompt kMixed[] = {
    {"code", "def fibonacci(n):\n    if n < 2:\n        return n\n"},
    {"code", "import os\nimport sys\n\n\ndef main():\n    args = sys.argv[1:]\n"},
    {"code", "class Stack:\n    def __init__(self):\n        self.items = []\n\n    def push(self, item):\n"},
    {"code", "for i in range(10):\n    print(i)\n\nwith open(path) as f:\n"},
    {"prose", "The weather today is quite pleasant and the children are playing outside in the"},
    {"prose", "In 1848, revolutions spread across Europe as citizens demanded"},
    {"noise", "zq8#Lk!pX@v 7&^ wQ}{ 93jf;;a"},
    {"noise", "Qx 0xA7 ~~ |||| vV vV vV ?! ;; 12 kk"},
};

// Prompts separated by lines "### LABEL".
absl::StatusOr<std::vector<TextPrompt>> ReadPromptFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read prompt file ", path));
  std::vector<TextPrompt> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("### ", 0) == 0) {
      out.push_back({line.substr(4), ""});
    } else if (!out.empty()) {
      out.back().text += (out.back().text.empty() ? "" : "\n") + line;
    }
  }
  std::erase_if(out, [](const TextPrompt& p) { return p.text.empty(); });
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no prompts (each starts with '### LABEL')"));
  return out;
}

// CUDA graphs the engines (b may be null) captured so far (0 on other backends).
int64_t GraphCaptures(const Engine* a, const Engine* b) {
  int64_t n = 0;
  for (const Engine* e : {a, b}) {
    if (!e) continue;
    if (const CudaBackendControl* c = AsCudaControl(e->backend())) n += c->GetStats().graph_captures;
  }
  return n;
}

std::string Hist(const std::vector<int64_t>& h) {
  std::string s;
  for (size_t k = 0; k < h.size(); ++k) {
    if (h[k]) absl::StrAppend(&s, s.empty() ? "" : " ", k, ":", h[k]);
  }
  return s;
}

}  // namespace

int BenchSpec(const std::vector<std::string>& args) {
  Config c("specd bench-spec");
  EngineOptions::AddFlags(&c);
  c.AddString("draft", "", "draft model (same vocabulary as --model); not needed with --proposer ngram");
  api::AddProposerFlags(&c);
  c.AddBool("chat", false, "render each prompt as a user message with the model's chat template");
  c.AddString("prompt-file", "", "workload: prompts separated by lines '### LABEL' (default: the built-in mixed one)");
  c.AddInt("max-tokens", 128, "tokens generated per prompt", 1, 1 << 16);
  c.AddBool("ignore-eos", true,
            "generate --max-tokens tokens whatever the model says (false: a prompt ends at end-of-generation, the "
            "same place in every mode when greedy)");
  c.AddDouble("temperature", 0.0, "sampling temperature for every prompt (0: greedy; outputs then compared)", 0.0,
              10.0);
  c.AddInt("top-k", 0, "top-k for every prompt (0: off)", 0, 1 << 24);
  c.AddDouble("top-p", 1.0, "top-p for every prompt (1: off)", 1e-6, 1.0);
  c.AddString("ks", "1,2,3,4,6,8", "fixed k values to compare");
  c.AddInt("draft-max", 8, "adaptive mode's largest k", 1, 32);
  c.AddDouble("min-confidence", -1.0,
              "adaptive mode: the draft stops below this top probability (-1: learned from the acceptance of its "
              "first token by confidence)",
              -1.0, 1.0);
  c.AddInt("repeats", 3, "runs of each mode (interleaved); the median is reported", 1, 100);
  c.AddInt("calibration-reps", 5, "timed calls per cost-table cell", 1, 100);
  c.AddBool("live-costs", true,
            "adaptive runs start from the calibrated table and keep measuring, as the coordinator does "
            "(false: they use the frozen table; always false with --costs)");
  c.AddString("costs", "",
              "use this cost table instead of measuring one (the 'calibrated costs:' line of another run, "
              "e.g. 'verify[0]=0.3ms verify[1]=0.34ms draft[1]=0.13ms')");
  c.AddString("log-level", "warn", "log level: debug, info, warn, error");
  c.Set("max-seqs", "2", "default").IgnoreError();
  c.Set("max-seq-len", "2048", "default").IgnoreError();
  if (int rc = ParseOrExit(c, args); rc >= 0) return rc;
  LogLevel lvl;
  if (!ParseLogLevel(c.GetString("log-level"), &lvl)) return Fail("bad --log-level");
  SetLogLevel(lvl);
  api::SpecDefaults sd;
  if (auto st = api::ProposerFromFlags(c, &sd); !st.ok()) return Fail(st);
  const bool ngram_only = sd.proposer == api::ProposerKind::kNgram;
  if (c.GetString("draft").empty() && !ngram_only) return Fail("--draft is required (except with --proposer ngram)");
  if (!c.GetString("draft").empty() && ngram_only) return Fail("--proposer ngram uses no --draft");
  auto ks = ParseList<int>(c.GetString("ks"), "k", 1, 32);
  if (!ks.ok()) return Fail(ks.status());
  const int draft_max = static_cast<int>(c.GetInt("draft-max"));
  int k_max = draft_max;
  for (int k : *ks) k_max = std::max(k_max, k);

  auto opts = EngineOptions::FromConfig(c);
  if (!opts.ok()) return Fail(opts.status());
  auto te = Engine::Create(*opts);
  if (!te.ok()) return Fail(te.status());
  EngineOptions dopts = *opts;
  dopts.model_path = c.GetString("draft");
  LocalTarget target(te->get());
  std::unique_ptr<Engine> de;
  std::unique_ptr<LocalDraft> draft;
  if (!ngram_only) {
    auto e = Engine::Create(dopts);
    if (!e.ok()) return Fail(e.status());
    de = *std::move(e);
    auto d = LocalDraft::Create(de.get(), k_max);
    if (!d.ok()) return Fail(d.status());
    draft = *std::move(d);
    if (auto st = target.Attach(draft->exchange().kind(), draft->exchange().name()); !st.ok()) return Fail(st);
  }
  api::RequestProposer proposer(sd.proposer, sd.ngram, draft.get());
  const Tokenizer& tok = (*te)->tokenizer();

  std::vector<TextPrompt> texts(std::begin(kMixed), std::end(kMixed));
  if (!c.GetString("prompt-file").empty()) {
    auto f = ReadPromptFile(c.GetString("prompt-file"));
    if (!f.ok()) return Fail(f.status());
    texts = *f;
  }
  std::vector<BenchPrompt> prompts;
  std::vector<std::string> labels;
  for (const TextPrompt& t : texts) {
    BenchPrompt p;
    p.label = t.label;
    if (c.GetBool("chat")) {
      auto text = tok.ApplyChatTemplate({{"user", t.text}}, /*add_generation_prompt=*/true);
      if (!text.ok()) return Fail(text.status());
      p.tokens = tok.Encode(*text, /*add_special=*/false, /*parse_special=*/true);  // the template has its own
    } else {
      p.tokens = tok.Encode(t.text, true, false);
    }
    p.sampling.temperature = static_cast<float>(c.GetDouble("temperature"));
    p.sampling.top_k = static_cast<int32_t>(c.GetInt("top-k"));
    p.sampling.top_p = static_cast<float>(c.GetDouble("top-p"));
    p.sampling.seed = 1;
    p.max_tokens = static_cast<int>(c.GetInt("max-tokens"));
    p.ignore_eos = c.GetBool("ignore-eos");
    if (p.tokens.empty()) return Fail("a prompt encodes to no tokens");
    prompts.push_back(std::move(p));
    if (std::find(labels.begin(), labels.end(), t.label) == labels.end()) labels.push_back(t.label);
  }

  // A slow EWMA: the refining pass averages over about a hundred calls per cell.
  SpecCosts costs(0.01);
  BenchPair pair{&target, draft.get(), &tok, proposer.get()};
  std::vector<BenchMode> modes = {BenchMode::TargetOnly()};
  for (int k : *ks) modes.push_back(BenchMode::Fixed(k));
  modes.push_back(BenchMode::Adaptive(draft_max, static_cast<float>(c.GetDouble("min-confidence"))));
  if (!c.GetString("costs").empty()) {
    if (auto st = costs.Load(c.GetString("costs")); !st.ok()) return Fail(st);
    std::fprintf(stderr, "given costs: %s\n", costs.ToString().c_str());
  } else {
    if (ngram_only) {
      api::SeedModelFreeCosts(&costs);  // no draft forwards; the workload's runs measure the verifies
    } else if (auto st = CalibrateCosts(pair, prompts[0].tokens, k_max,
                                        static_cast<int>(c.GetInt("calibration-reps")), &costs);
               !st.ok()) {
      return Fail(st);
    }
    // The workload's own calls (other context lengths, warm caches) refine it.
    for (size_t m = 0; m + 1 < modes.size(); ++m) {
      if (auto r = RunSpecBench(pair, prompts, modes[m], &costs); !r.ok()) return Fail(r.status());
    }
    std::fprintf(stderr, "calibrated costs: %s\n", costs.ToString().c_str());
  }
  costs.Freeze();

  const bool live_costs = c.GetBool("live-costs") && c.GetString("costs").empty();
  std::vector<std::vector<BenchResult>> runs(modes.size());
  std::vector<int64_t> captures(modes.size(), 0);  // CUDA graphs captured during the recorded runs
  for (int rep = 0; rep < c.GetInt("repeats"); ++rep) {
    for (size_t m = 0; m < modes.size(); ++m) {
      const int64_t captures0 = GraphCaptures(te->get(), de.get());
      // Live: a fresh copy of the calibrated table for each adaptive run.
      SpecCosts live;
      const bool use_live = modes[m].adaptive && live_costs;
      if (use_live && !live.Load(costs.ToString()).ok()) return Fail("cannot copy the cost table");
      auto r = RunSpecBench(pair, prompts, modes[m], use_live ? &live : &costs, &costs);
      captures[m] += GraphCaptures(te->get(), de.get()) - captures0;
      if (!r.ok()) return Fail(r.status());
      runs[m].push_back(*std::move(r));
    }
  }
  std::vector<BenchResult> res;
  for (auto& r : runs) res.push_back(MedianRun(std::move(r)));

  const double base = res[0].TokensPerSecond();
  bool lossless = true;
  const bool greedy = c.GetDouble("temperature") <= 0;
  std::printf("%zu prompts x %d tokens, %d repeats (median); model %s, draft %s; proposer %s (%s)\n", prompts.size(),
              static_cast<int>(c.GetInt("max-tokens")), static_cast<int>(c.GetInt("repeats")),
              opts->model_path.c_str(), ngram_only ? "(none)" : dopts.model_path.c_str(),
              api::ProposerName(sd.proposer), sd.ngram.ToString().c_str());
  std::printf("%-14s %9s %8s %11s %7s %8s %7s", "mode", "tok/s", "vs t-o", "model tok/s", "accept", "acc.len",
              "mean k");
  for (const std::string& l : labels) std::printf(" %10s", (l + " tok/s").substr(0, 10).c_str());
  std::printf("  k histogram (drafts verified: steps)\n");
  for (const BenchResult& r : res) {
    std::printf("%-14s %9.1f %7.2fx %11.1f %6.1f%% %8.2f %7.2f", r.mode.c_str(), r.TokensPerSecond(),
                base > 0 ? r.TokensPerSecond() / base : 0.0, r.ModeledTokensPerSecond(), 100 * r.AcceptanceRate(),
                r.MeanAcceptedLength(), r.MeanK());
    for (const std::string& l : labels) std::printf(" %10.1f", r.TokensPerSecond(l));
    std::printf("  %s\n", Hist(r.k_hist).c_str());
    if (greedy) {
      for (size_t i = 0; i < r.prompts.size(); ++i) lossless &= r.prompts[i].output == res[0].prompts[i].output;
    }
  }
  std::printf("time split (ms, median run): mode, prefill, draft calls, verify calls, other (the loop, draft opens); "
              "CUDA graph captures in all runs\n");
  for (size_t m = 0; m < res.size(); ++m) {
    const BenchResult& r = res[m];
    std::printf("  %-14s %8.2f %8.2f %8.2f %8.2f %6lld\n", r.mode.c_str(), 1e3 * r.prefill_seconds,
                1e3 * r.draft_seconds, 1e3 * r.verify_seconds,
                1e3 * (r.seconds - r.prefill_seconds - r.draft_seconds - r.verify_seconds),
                static_cast<long long>(captures[m]));
  }
  std::printf("decode (median run, prefill excluded): mode, tokens, tok/s, vs target-only\n");
  for (const BenchResult& r : res) {
    std::printf("  %-14s %8lld %8.1f %7.2fx\n", r.mode.c_str(), static_cast<long long>(r.tokens),
                r.DecodeTokensPerSecond(),
                res[0].DecodeTokensPerSecond() > 0 ? r.DecodeTokensPerSecond() / res[0].DecodeTokensPerSecond() : 0.0);
  }
  std::printf("step anatomy (median run), measured by the run: ms per step of draft forwards, verify forward, "
              "acceptance, transport, gate, wait, other requests' prefill, host; overhead = transport + gate + wait + "
              "host\n");
  std::printf("  %-14s %8s %8s %8s %8s %8s %8s %8s %8s %9s\n", "mode", "draft", "verify", "accept", "transp.", "gate",
              "wait", "prefill", "host", "overhead");
  for (const BenchResult& r : res) {
    const double ms = r.steps > 0 ? 1e3 / static_cast<double>(r.steps) : 0.0;
    std::printf("  %-14s %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f\n", r.mode.c_str(),
                r.time.draft_forward * ms, r.time.verify_forward * ms, r.time.accept * ms, r.time.transport * ms,
                r.time.gate * ms, r.time.wait * ms, r.time.prefill * ms, r.time.host * ms, r.time.overhead() * ms);
  }
  std::printf("adaptive's acceptance prior at the end of its median run: %s\n", res.back().acceptance_prior.c_str());
  // Measured, then as the cost table prices the same choices.
  for (const bool modeled : {false, true}) {
    auto rate = [&](const BenchResult& r) { return modeled ? r.ModeledTokensPerSecond() : r.TokensPerSecond(); };
    double best_fixed = 0;
    std::string best_name;
    for (size_t m = 1; m + 1 < res.size(); ++m) {
      if (rate(res[m]) > best_fixed) {
        best_fixed = rate(res[m]);
        best_name = res[m].mode;
      }
    }
    const double adaptive = rate(res.back()), t_o = rate(res[0]);
    std::printf("adaptive%s: %.2fx the best fixed k (%s), %.2fx target-only\n", modeled ? " (modeled)" : "",
                best_fixed > 0 ? adaptive / best_fixed : 0.0, best_name.c_str(), t_o > 0 ? adaptive / t_o : 0.0);
  }
  if (greedy) std::printf("lossless: %s\n", lossless ? "every mode's output equals target-only's" : "OUTPUTS DIFFER");
  return greedy && !lossless ? 1 : 0;
}

}  // namespace specd::cli
