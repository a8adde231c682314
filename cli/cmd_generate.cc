// specd generate / specd chat: one request through the request API
// (common/api/request.h), in process on one model (optionally with a draft
// model for speculative decoding) or through a coordinator. The flags make
// one api::Request; the generator is the only difference.
#include <cstdio>
#include <utility>
#include <vector>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "common/api/local_generator.h"
#include "common/backend/cuda/cuda_backend.h"
#include "common/util/log.h"

#if defined(SPECD_HAVE_CLIENT)
#include "coordinator/client/client.h"
#endif

namespace specd::cli {
namespace {

void AddRequestFlags(Config* c) {
  c->AddString("prompt", "", "prompt text (with --chat: the user message)");
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
  c->AddString("stop", "", "stop string (generation ends before it)");
  c->AddInt("k", 4, "draft tokens per step; given explicitly: fixed k (unless --adaptive is given too)", 0, 64);
  c->AddBool("adaptive", true, "choose the speculation length per step (acceptance and measured costs)");
  c->AddInt("draft-max", 8, "adaptive: most draft tokens per step (in process)", 1, 64);
  c->AddString("warmup", "auto",
               "in process: before the request, run each speculation length's step once greedy and once sampled, so "
               "that the request does not pay their first runs (auto: where a backend prepares shapes, CUDA graphs; "
               "always; off)");
  c->AddDouble("min-confidence", -1.0, "the draft stops below this top probability (-1: 0 fixed, learned adaptive)",
               -1.0, 1.0);
  c->AddString("acceptance-prior", "",
               "in process, adaptive: start from this acceptance prior (the 'acceptance prior' line of specd stats, "
               "bench-spec or a previous generate); empty: learned as the request runs");
  api::AddProposerFlags(c);  // --proposer given: this request's; --ngram-min/max: in process only
  c->AddBool("no-speculation", false, "target-only decoding for this request");
  c->AddInt("timeout-ms", 0, "request deadline in milliseconds (0: none)", 0, 1ll << 40);
  c->AddBool("print-ids", false, "print the generated token ids on stdout after the text");
  c->AddBool("print-prompt-ids", false, "print a plain prompt's token ids before generating");
  c->AddString("coordinator", "", "generate through this coordinator (host:port or unix:PATH) instead of in process");
  c->AddString("draft", "", "in process: draft model for speculative decoding");
  AddConnectFlags(c);
  c->AddString("log-level", "warn", "log level: debug, info, warn, error");
}

api::Request RequestFromFlags(const Config& c, bool chat) {
  api::Request r;
  if (chat) {
    if (!c.GetString("system").empty()) r.messages.push_back({"system", c.GetString("system")});
    r.messages.push_back({"user", c.GetString("prompt")});
  } else {
    r.prompt = c.GetString("prompt");
  }
  r.max_tokens = static_cast<int>(c.GetInt("max-tokens"));
  SamplingParams& p = r.sampling;
  p.temperature = static_cast<float>(c.GetDouble("temperature"));
  p.top_k = static_cast<int32_t>(c.GetInt("top-k"));
  p.top_p = static_cast<float>(c.GetDouble("top-p"));
  p.min_p = static_cast<float>(c.GetDouble("min-p"));
  p.repetition_penalty = static_cast<float>(c.GetDouble("repetition-penalty"));
  p.seed = static_cast<uint64_t>(c.GetInt("seed"));
  r.ignore_eos = c.GetBool("ignore-eos");
  if (!c.GetString("stop").empty()) r.stop.push_back(c.GetString("stop"));
  // An explicit --k asks for that k, unless --adaptive is given explicitly too.
  if (c.IsSet("k")) r.k = static_cast<int>(c.GetInt("k"));
  if (c.IsSet("adaptive")) r.adaptive = c.GetBool("adaptive");
  r.disable_speculation = c.GetBool("no-speculation");
  if (c.GetDouble("min-confidence") > 0) r.min_confidence = static_cast<float>(c.GetDouble("min-confidence"));
  if (c.GetInt("timeout-ms") > 0) r.deadline = api::After(std::chrono::milliseconds(c.GetInt("timeout-ms")));
  return r;
}

// `local` (in process only) gets the LocalGenerator, for its acceptance prior.
absl::StatusOr<std::unique_ptr<api::Generator>> MakeGenerator(const Config& c, api::LocalGenerator** local) {
  if (!c.GetString("coordinator").empty()) {
    if (!c.GetString("acceptance-prior").empty())
      return absl::InvalidArgumentError("--acceptance-prior is for in-process generation (the coordinator has its own)");
    if (c.IsSet("ngram-min") || c.IsSet("ngram-max"))
      return absl::InvalidArgumentError("--ngram-min/--ngram-max are for in-process generation (the coordinator has its own)");
#if defined(SPECD_HAVE_CLIENT)
    SPECD_ASSIGN_OR_RETURN(auto cl, ConnectFromFlags(c));
    return std::unique_ptr<api::Generator>(std::move(cl));
#else
    return absl::UnimplementedError("this build has no coordinator client");
#endif
  }
  if (c.GetString("model").empty()) return absl::InvalidArgumentError("--model (or --coordinator) is required");
  SPECD_ASSIGN_OR_RETURN(EngineOptions opts, EngineOptions::FromConfig(c));
  api::SpecDefaults d;
  d.k = static_cast<int>(c.GetInt("k"));
  d.adaptive = c.GetBool("adaptive");
  d.draft_max = static_cast<int>(c.GetInt("draft-max"));
  d.min_confidence = static_cast<float>(c.GetDouble("min-confidence"));
  SPECD_ASSIGN_OR_RETURN(d.warmup, ParseWarmupMode(c.GetString("warmup")));
  SPECD_RETURN_IF_ERROR(api::ProposerFromFlags(c, &d));
  SPECD_ASSIGN_OR_RETURN(auto g, api::LocalGenerator::Create(opts, c.GetString("draft"), d));
  if (!c.GetString("acceptance-prior").empty()) SPECD_RETURN_IF_ERROR(g->LoadAcceptancePrior(c.GetString("acceptance-prior")));
  *local = g.get();
  return std::unique_ptr<api::Generator>(std::move(g));
}

int Run(const std::vector<std::string>& args, const char* program, bool chat) {
  Config c(program);
  EngineOptions::AddFlags(&c);
  AddRequestFlags(&c);
  c.Set("max-seqs", "1", "default").IgnoreError();
  if (int rc = ParseOrExit(c, args); rc >= 0) return rc;
  LogLevel lvl;
  if (!ParseLogLevel(c.GetString("log-level"), &lvl)) return Fail("bad --log-level");
  SetLogLevel(lvl);
  chat = chat || c.GetBool("chat");
  if (c.GetString("prompt").empty()) return Fail("--prompt is required (and must not be empty)");
  api::LocalGenerator* local = nullptr;
  auto gen = MakeGenerator(c, &local);
  if (!gen.ok()) return Fail(gen.status());
  api::Request req = RequestFromFlags(c, chat);
  const auto proposer = api::ParseProposer(c.GetString("proposer"));
  if (!proposer.ok()) return Fail(proposer.status());
  if (c.IsSet("proposer")) req.proposer = *proposer;
  if (c.GetBool("print-prompt-ids")) {
    if (chat) return Fail("--print-prompt-ids takes a plain prompt (not --chat)");
    auto ids = (*gen)->Tokenize(req.prompt, req.add_special, req.parse_special);
    if (!ids.ok()) return Fail(ids.status());
    std::printf("prompt ids:");
    for (int32_t t : *ids) std::printf(" %d", t);
    std::printf("\n");
  }
  // CUDA: batches replayed from graphs, captured, and run eagerly (a shape's first run), and the times a
  // buffer's growth dropped every graph: the load and the warm-up's, then the request's own.
  auto graph_stats = [&] {
    std::vector<std::pair<const char*, CudaBackendControl::Stats>> v;
    if (!local) return v;
    for (const auto& [name, e] : {std::pair<const char*, const Engine*>{"target", &local->target_engine()},
                                  {"draft", local->draft_engine()}}) {
      const CudaBackendControl* cc = e ? AsCudaControl(e->backend()) : nullptr;
      if (cc) v.emplace_back(name, cc->GetStats());
    }
    return v;
  };
  const auto before = graph_stats();
  auto sum = (*gen)->Generate(req, [](const api::Event& ev) {
    std::fputs(ev.text.c_str(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::printf("\n");
  if (!sum.ok()) return Fail(sum.status());
  if (c.GetBool("print-ids")) {
    std::printf("ids:");
    for (int32_t t : sum->tokens) std::printf(" %d", t);
    std::printf("\n");
  }
  std::fprintf(stderr, "prompt: %d tokens (prefill %.3f s); %s\n", sum->prompt_tokens, sum->prefill_seconds,
               api::FormatSummary(*sum).c_str());
  if (local && sum->adaptive) {
    std::fprintf(stderr, "acceptance prior: %s\n", local->AcceptancePriorText(*proposer).c_str());
    std::fprintf(stderr, "step costs: %s\n", local->CostsText(*proposer).c_str());
  }
  const auto after = graph_stats();
  for (size_t i = 0; i < after.size() && i < before.size(); ++i) {
    const auto& [name, a] = after[i];
    const auto& b = before[i].second;
    std::fprintf(stderr,
                 "%s graphs: %lld launches, %lld captures, %lld eager batches, %lld drops (the request: %lld, %lld, "
                 "%lld, %lld)\n",
                 name, static_cast<long long>(a.graph_launches), static_cast<long long>(a.graph_captures),
                 static_cast<long long>(a.eager_flushes), static_cast<long long>(a.graph_drops),
                 static_cast<long long>(a.graph_launches - b.graph_launches),
                 static_cast<long long>(a.graph_captures - b.graph_captures),
                 static_cast<long long>(a.eager_flushes - b.eager_flushes),
                 static_cast<long long>(a.graph_drops - b.graph_drops));
  }
  return 0;
}

}  // namespace

int Generate(const std::vector<std::string>& args) { return Run(args, "specd generate", false); }
int Chat(const std::vector<std::string>& args) { return Run(args, "specd chat", true); }

}  // namespace specd::cli
