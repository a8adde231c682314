#include "common/api/local_generator.h"

#include <algorithm>

#include "common/spec/warmup.h"
#include "common/util/log.h"

namespace specd::api {

absl::StatusOr<std::unique_ptr<LocalGenerator>> LocalGenerator::Create(const EngineOptions& opts,
                                                                       const std::string& draft_path,
                                                                       const SpecDefaults& spec, const Limits& limits) {
  std::unique_ptr<LocalGenerator> g(new LocalGenerator());
  g->spec_ = spec;
  g->limits_ = limits;
  SPECD_RETURN_IF_ERROR(spec.ngram.Validate());
  SeedModelFreeCosts(&g->ngram_costs_);
  SPECD_ASSIGN_OR_RETURN(g->target_engine_, Engine::Create(opts));
  g->target_ = std::make_unique<LocalTarget>(g->target_engine_.get());
  if (!draft_path.empty()) {
    EngineOptions d = opts;
    d.model_path = draft_path;
    SPECD_ASSIGN_OR_RETURN(g->draft_engine_, Engine::Create(d));
    SPECD_ASSIGN_OR_RETURN(g->draft_, LocalDraft::Create(g->draft_engine_.get(), std::max(spec.k, spec.draft_max)));
    SPECD_RETURN_IF_ERROR(g->target_->Attach(g->draft_->exchange().kind(), g->draft_->exchange().name()));
  }
  const bool prepares = g->target_engine_->backend()->PreparesShapes() ||
                        (g->draft_engine_ && g->draft_engine_->backend()->PreparesShapes());
  if (WarmsUp(spec.warmup, prepares)) {
    WarmupOptions w;
    if (g->draft_) w.k_max = std::min(g->draft_->k_max(), opts.max_out_rows - 1);
    w.max_context = opts.max_seq_len;
    w.prompt_tokens = opts.max_batch_tokens;
    w.costs = &g->costs_;
    const WarmupReport rep = WarmUp(g->tokenizer(), *g->target_, g->draft_.get(), w);
    if (!rep.status.ok())
      return absl::Status(rep.status.code(), absl::StrCat("warm-up (--warmup off skips it): ", rep.status.message()));
    SPECD_LOG(INFO) << "warm-up: every step shape run before the first request" << Kv("ran", rep.ToString());
  }
  return g;
}

absl::Status LocalGenerator::LoadAcceptancePrior(const std::string& text) {
  std::lock_guard<std::mutex> l(mu_);
  return prior_.Load(text);
}

bool LocalGenerator::NgramOnly(ProposerKind kind) const {
  return kind == ProposerKind::kNgram || (kind == ProposerKind::kNgramDraft && !draft_);
}

std::string LocalGenerator::AcceptancePriorText(ProposerKind kind) {
  std::lock_guard<std::mutex> l(mu_);
  return (NgramOnly(kind) ? ngram_prior_ : prior_).ToString();
}

std::string LocalGenerator::CostsText(ProposerKind kind) {
  std::lock_guard<std::mutex> l(mu_);
  return (NgramOnly(kind) ? ngram_costs_ : costs_).ToString();
}

absl::StatusOr<std::vector<int32_t>> LocalGenerator::Tokenize(const std::string& text, bool add_special,
                                                              bool parse_special) {
  return tokenizer().Encode(text, add_special, parse_special);
}

absl::StatusOr<Summary> LocalGenerator::Generate(const Request& req, const EventFn& on_event) {
  const auto arrival = std::chrono::steady_clock::now();
  SPECD_ASSIGN_OR_RETURN(const int max_tokens, Check(req, limits_));
  const int context = target_engine_->options().max_seq_len;
  SPECD_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, EncodePrompt(req, tokenizer(), context));
  std::lock_guard<std::mutex> l(mu_);
  const SpecChoice choice = ChooseSpeculation(req, spec_);
  RequestProposer proposer(choice.proposer, spec_.ngram, draft_.get());
  const bool uses_draft = draft_ && choice.proposer != ProposerKind::kNgram;
  if (req.k && uses_draft && *req.k > draft_->k_max())
    return absl::InvalidArgumentError(absl::StrCat("speculation k ", *req.k, " exceeds the draft's ", draft_->k_max()));
  if (req.k && proposer.get() && *req.k >= target_engine_->options().max_out_rows)
    return absl::InvalidArgumentError(absl::StrCat("speculation k ", *req.k, " exceeds the target's verify limit of ",
                                                   target_engine_->options().max_out_rows - 1));
  const int run_tokens = std::min<int>(max_tokens, context - static_cast<int>(prompt.size()));
  const int prompt_tokens = static_cast<int>(prompt.size());
  SpecRequest sr = ToSpecRequest(req, std::move(prompt), run_tokens, choice, context);
  if (!proposer.get()) sr.k = 0;  // the draft alone, and no draft
  sr.costs = proposer.ngram_only() ? &ngram_costs_ : &costs_;
  sr.prior = proposer.ngram_only() ? &ngram_prior_ : &prior_;
  double ttft = 0;
  const SpecResult r = RunSpeculative(sr, tokenizer(), *target_, proposer.get(), [&](const StepEvent& ev) {
    if (!ev.tokens.empty() && ttft == 0)
      ttft = std::chrono::duration<double>(std::chrono::steady_clock::now() - arrival).count();
    return on_event ? on_event(ToEvent(ev)) : true;
  });
  if (r.reason == FinishReason::kCancelled) return absl::CancelledError("cancelled by the caller");
  if (r.reason == FinishReason::kError) return r.status;
  Summary s = ToSummary(r, prompt_tokens, choice.adaptive && sr.k > 0);
  s.time_to_first_token_seconds = ttft;
  return s;
}

}  // namespace specd::api
