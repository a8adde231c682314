// specd generate: in-process generation on one model (optionally with a
// draft model for speculative decoding), or through a coordinator.
#include <chrono>
#include <cstdio>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "common/engine/engine.h"
#include "common/engine/spec_local.h"
#include "common/spec/loop.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/log.h"

namespace specd::cli {

int GenerateRemote(const Config& c);  // cmd_client.cc

namespace {
double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

void AddSamplingFlags(Config* c) {
  c->AddString("prompt", "", "prompt text");
  c->AddBool("chat", false, "render the prompt as a user message with the model's chat template");
  c->AddString("system", "", "system message (with --chat)");
  c->AddInt("max-tokens", 64, "tokens to generate at most", 1, 1 << 20);
  c->AddDouble("temperature", 0.0, "sampling temperature (0: greedy)", 0.0, 100.0);
  c->AddInt("top-k", 0, "top-k (0: off)", 0, 1 << 24);
  c->AddDouble("top-p", 1.0, "nucleus probability (1: off)", 1e-6, 1.0);
  c->AddDouble("min-p", 0.0, "min-p relative to the top token (0: off)", 0.0, 0.999);
  c->AddDouble("repetition-penalty", 1.0, "repetition penalty (1: off)", 0.01, 100.0);
  c->AddInt("seed", 0, "sampling seed");
  c->AddBool("ignore-eos", false, "keep generating past end-of-generation tokens");
  c->AddBool("print-ids", false, "print the generated token ids on stdout after the text");
  c->AddBool("print-prompt-ids", false, "print the prompt's token ids before generating");
}

SamplingParams SamplingFromConfig(const Config& c) {
  SamplingParams p;
  p.temperature = static_cast<float>(c.GetDouble("temperature"));
  p.top_k = static_cast<int32_t>(c.GetInt("top-k"));
  p.top_p = static_cast<float>(c.GetDouble("top-p"));
  p.min_p = static_cast<float>(c.GetDouble("min-p"));
  p.repetition_penalty = static_cast<float>(c.GetDouble("repetition-penalty"));
  p.seed = static_cast<uint64_t>(c.GetInt("seed"));
  return p;
}

int Generate(const std::vector<std::string>& args) {
  Config c("specd generate");
  EngineOptions::AddFlags(&c);
  AddSamplingFlags(&c);
  c.AddString("draft", "", "draft model for in-process speculative decoding");
  c.AddInt("k", 4, "draft tokens per step; given explicitly: fixed k (unless --adaptive is given too)", 1, 16);
  c.AddBool("adaptive", true, "choose the speculation length per step (acceptance and measured costs)");
  c.AddInt("draft-max", 8, "adaptive: most draft tokens per step", 1, 16);
  c.AddDouble("min-confidence", -1.0, "the draft stops below this top probability (-1: 0 fixed, learned adaptive)", -1.0,
              1.0);
  c.AddString("acceptance-prior", "",
              "adaptive: start from this acceptance prior (the 'acceptance prior' line of specd stats, bench-spec or "
              "a previous generate); empty: learned as the request runs");
  c.AddString("coordinator", "", "generate through this coordinator (host:port or unix:PATH) instead of in-process");
  c.AddBool("no-speculation", false, "with --coordinator: target-only decoding for this request");
  c.AddString("stop", "", "stop string");
  c.AddInt("timeout-ms", 0, "with --coordinator: request deadline in milliseconds (0: none)", 0, 1ll << 40);
  c.AddString("log-level", "warn", "log level: debug, info, warn, error");
  c.Set("max-seqs", "1", "default").IgnoreError();
  // `model` is not required with --coordinator; check below.
  if (int rc = ParseOrExit(c, args); rc >= 0) return rc;
  LogLevel lvl;
  if (!ParseLogLevel(c.GetString("log-level"), &lvl)) return Fail("bad --log-level");
  SetLogLevel(lvl);
  if (!c.GetString("coordinator").empty()) return GenerateRemote(c);
  if (c.GetString("prompt").empty()) return Fail("--prompt is required (and must not be empty)");
  auto opts = EngineOptions::FromConfig(c);
  if (!opts.ok()) return Fail(opts.status());
  auto target_engine = Engine::Create(*opts);
  if (!target_engine.ok()) return Fail(target_engine.status());
  Engine& e = **target_engine;
  const Tokenizer& tok = e.tokenizer();
  std::string text = c.GetString("prompt");
  if (c.GetBool("chat")) {
    std::vector<ChatMessage> msgs;
    if (!c.GetString("system").empty()) msgs.push_back({"system", c.GetString("system")});
    msgs.push_back({"user", text});
    auto r = tok.ApplyChatTemplate(msgs, true);
    if (!r.ok()) return Fail(r.status());
    text = *r;
  }
  // A rendered chat template carries its own bos.
  std::vector<int32_t> prompt = tok.Encode(text, !c.GetBool("chat"), true);
  if (prompt.empty()) return Fail("the prompt encodes to no tokens");
  if (c.GetBool("print-prompt-ids")) {
    std::printf("prompt ids:");
    for (int32_t t : prompt) std::printf(" %d", t);
    std::printf("\n");
  }

  // The same speculative loop the coordinator runs, on in-process clients.
  std::unique_ptr<Engine> draft_engine;
  std::unique_ptr<LocalDraft> draft;
  const int k = static_cast<int>(c.GetInt("k"));
  // An explicit --k asks for that k, unless --adaptive is given explicitly too.
  const bool adaptive = c.GetBool("adaptive") && (!c.IsSet("k") || c.IsSet("adaptive"));
  const int draft_max = static_cast<int>(c.GetInt("draft-max"));
  LocalTarget target(&e);
  if (!c.GetString("draft").empty()) {
    EngineOptions d = *opts;
    d.model_path = c.GetString("draft");
    auto de = Engine::Create(d);
    if (!de.ok()) return Fail(de.status());
    draft_engine = std::move(*de);
    auto ld = LocalDraft::Create(draft_engine.get(), adaptive ? std::max(k, draft_max) : k);
    if (!ld.ok()) return Fail(ld.status());
    draft = std::move(*ld);
    if (auto st = target.Attach(draft->exchange().kind(), draft->exchange().name()); !st.ok()) return Fail(st);
  }
  // As in the coordinator: costs measured and acceptance learned as the
  // request runs, so the adaptive policy has a prior from its first steps.
  SpecCosts costs;
  AcceptancePrior prior;
  if (!c.GetString("acceptance-prior").empty()) {
    if (absl::Status st = prior.Load(c.GetString("acceptance-prior")); !st.ok()) return Fail(st);
  }
  SpecRequest req;
  req.costs = &costs;
  req.prior = &prior;
  req.prompt = prompt;
  req.sampling = SamplingFromConfig(c);
  req.max_tokens = static_cast<int>(c.GetInt("max-tokens"));
  req.k = draft ? k : 0;
  req.policy.adaptive = adaptive;
  req.policy.draft_max = draft_max;
  const double conf = c.GetDouble("min-confidence");
  req.min_confidence = static_cast<float>(conf);  // < 0: the loop's default (0 fixed, learned adaptive)
  req.max_context = opts->max_seq_len;
  req.ignore_eos = c.GetBool("ignore-eos");
  if (!c.GetString("stop").empty()) req.stop.push_back(c.GetString("stop"));
  // Prefill is timed on its own: Open runs it for both models.
  const auto t0 = std::chrono::steady_clock::now();
  if (auto st = target.Open(req.seq, prompt, req.sampling, kNoDeadline); !st.ok()) return Fail(st);
  const double prefill_s = Since(t0);
  target.Release(req.seq);
  const SpecResult r = RunSpeculative(req, tok, target, draft.get(), [](const StepEvent& ev) {
    std::fputs(ev.text.c_str(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::printf("\n");
  if (!r.status.ok()) return Fail(r.status);
  if (c.GetBool("print-ids")) {
    std::printf("ids:");
    for (int32_t t : r.tokens) std::printf(" %d", t);
    std::printf("\n");
  }
  std::fprintf(stderr,
               "prompt: %zu tokens, prefill %.1f tok/s (%.3f s); generated: %zu tokens, %.2f tok/s (%.3f s), "
               "finish: %s",
               prompt.size(), prompt.size() / std::max(prefill_s, 1e-9), prefill_s, r.tokens.size(),
               r.TokensPerSecond(), r.stats.elapsed_seconds, FinishReasonName(r.reason));
  if (draft) {
    int64_t kw = 0;
    for (size_t i = 0; i < r.stats.k_hist.size(); ++i) kw += static_cast<int64_t>(i) * r.stats.k_hist[i];
    std::fprintf(stderr, "; %s (mean k %.2f) acceptance %.1f%% (%lld/%lld), mean accepted length %.2f tokens/step",
                 adaptive ? absl::StrFormat("adaptive k<=%d", draft_max).c_str() : absl::StrFormat("k=%d", k).c_str(),
                 r.stats.steps ? static_cast<double>(kw) / r.stats.steps : 0.0, 100.0 * r.stats.AcceptanceRate(),
                 static_cast<long long>(r.stats.accepted), static_cast<long long>(r.stats.proposed),
                 r.stats.MeanAcceptedLength());
  }
  std::fprintf(stderr, "\nstep time %s\n", r.stats.time.PerStep(r.stats.steps).c_str());
  if (draft && adaptive) std::fprintf(stderr, "acceptance prior: %s\n", prior.ToString().c_str());
  return 0;
}

}  // namespace specd::cli
