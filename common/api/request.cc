#include "common/api/request.h"

#include "absl/strings/str_format.h"

namespace specd::api {

double Summary::MeanK() const {
  int64_t steps_n = 0, drafts = 0;
  for (size_t k = 0; k < k_histogram.size(); ++k) {
    steps_n += k_histogram[k];
    drafts += static_cast<int64_t>(k) * k_histogram[k];
  }
  return steps_n ? static_cast<double>(drafts) / static_cast<double>(steps_n) : 0.0;
}

const char* ProposerName(ProposerKind k) {
  switch (k) {
    case ProposerKind::kDraft: return "draft";
    case ProposerKind::kNgram: return "ngram";
    case ProposerKind::kNgramDraft: return "ngram+draft";
  }
  return "unknown";
}

absl::StatusOr<ProposerKind> ParseProposer(std::string_view name) {
  for (ProposerKind k : {ProposerKind::kDraft, ProposerKind::kNgram, ProposerKind::kNgramDraft}) {
    if (name == ProposerName(k)) return k;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown proposer '", std::string(name), "' (one of: draft, ngram, ngram+draft)"));
}

void AddProposerFlags(Config* c) {
  c->AddString("proposer", "draft",
               "where proposals come from: draft (the draft model), ngram (prompt lookup over prompt + output, no "
               "model; works without a draft), ngram+draft (the n-gram proposal where the lookup finds one, the "
               "draft's otherwise)");
  c->AddInt("ngram-min", 1, "n-gram proposals: the shortest suffix looked up", 1, 16);
  c->AddInt("ngram-max", 4, "n-gram proposals: the longest suffix looked up (tried first)", 1, 16);
}

absl::Status ProposerFromFlags(const Config& c, SpecDefaults* d) {
  SPECD_ASSIGN_OR_RETURN(d->proposer, ParseProposer(c.GetString("proposer")));
  d->ngram.min_n = static_cast<int>(c.GetInt("ngram-min"));
  d->ngram.max_n = static_cast<int>(c.GetInt("ngram-max"));
  return d->ngram.Validate();
}

RequestProposer::RequestProposer(ProposerKind kind, const NgramOptions& ngram, Proposer* draft) : ngram_(ngram) {
  switch (kind) {
    case ProposerKind::kDraft: p_ = draft; break;
    case ProposerKind::kNgram: p_ = &ngram_; break;
    case ProposerKind::kNgramDraft:
      if (draft) {
        chain_.emplace(std::vector<Proposer*>{&ngram_, draft});
        p_ = &*chain_;
      } else {
        p_ = &ngram_;
      }
      break;
  }
}

void SeedModelFreeCosts(SpecCosts* c) { c->ObserveDraft(1, 0.0); }

absl::StatusOr<int> Check(const Request& req, const Limits& limits) {
  auto invalid = [](auto... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  const int max_tokens = req.max_tokens == 0 ? limits.default_max_tokens : req.max_tokens;
  if (max_tokens < 1 || max_tokens > limits.max_tokens_limit)
    return invalid("max_tokens ", req.max_tokens, " out of range [1, ", limits.max_tokens_limit, "]");
  if (static_cast<int>(req.stop.size()) > kMaxStops) return invalid("at most ", kMaxStops, " stop strings");
  for (const std::string& s : req.stop) {
    if (s.empty() || s.size() > kMaxStopBytes) return invalid("stop strings must have 1 to ", kMaxStopBytes, " bytes");
  }
  if (req.sampling.temperature < 0) return invalid("temperature ", req.sampling.temperature, " is negative");
  SPECD_RETURN_IF_ERROR(req.sampling.Validate());
  if (req.k && (*req.k < 0 || *req.k > kMaxK)) return invalid("speculation k ", *req.k, " out of range [0, ", kMaxK, "]");
  if (!(req.min_confidence >= 0.0f && req.min_confidence <= 1.0f))
    return invalid("speculation min_confidence must be in [0, 1]");
  if (req.messages.empty() && req.prompt.empty() && req.prompt_tokens.empty()) return invalid("empty prompt");
  return max_tokens;
}

absl::StatusOr<std::vector<int32_t>> EncodePrompt(const Request& req, const Tokenizer& tok, int context) {
  std::vector<int32_t> prompt;
  if (!req.messages.empty()) {
    SPECD_ASSIGN_OR_RETURN(const std::string text, tok.ApplyChatTemplate(req.messages, /*add_generation_prompt=*/true));
    // A rendered template carries its own bos and control tokens.
    prompt = tok.Encode(text, /*add_special=*/false, /*parse_special=*/true);
  } else if (!req.prompt_tokens.empty()) {
    for (int32_t t : req.prompt_tokens) {
      if (t < 0 || t >= tok.vocab_size())
        return absl::InvalidArgumentError(
            absl::StrCat("prompt token id ", t, " out of range [0, ", tok.vocab_size(), ")"));
    }
    prompt = req.prompt_tokens;
  } else {
    prompt = tok.Encode(req.prompt, req.add_special, req.parse_special);
  }
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt encodes to no tokens");
  if (context > 0 && static_cast<int64_t>(prompt.size()) >= context)
    return absl::InvalidArgumentError(absl::StrCat("prompt of ", prompt.size(), " tokens does not fit the context of ",
                                                   context, " positions (it must leave room for one generated token)"));
  return prompt;
}

SpecChoice ChooseSpeculation(const Request& req, const SpecDefaults& d) {
  SpecChoice c;
  // An explicit k means fixed k unless adaptive is asked for too (then k is
  // the cap); otherwise the generator's settings.
  c.adaptive = !req.disable_speculation && (req.adaptive ? *req.adaptive : !req.k && d.adaptive);
  c.draft_max = c.adaptive && req.k ? *req.k : d.draft_max;
  if (req.disable_speculation) {
    c.k = 0;
  } else if (req.k && !c.adaptive) {
    c.k = *req.k;
  } else {
    c.k = d.enabled ? d.k : 0;  // adaptive: the k until costs are measured
    c.follow_live = true;
  }
  // Unset: fixed mode never stops early; adaptive mode learns the threshold.
  c.min_confidence = req.min_confidence > 0 ? req.min_confidence : d.min_confidence;
  c.proposer = req.proposer.value_or(d.proposer);
  return c;
}

SpecRequest ToSpecRequest(const Request& req, std::vector<int32_t> prompt, int max_tokens, const SpecChoice& c,
                          int context) {
  SpecRequest sr;
  sr.prompt = std::move(prompt);
  sr.sampling = req.sampling;
  sr.max_tokens = max_tokens;
  sr.ignore_eos = req.ignore_eos;
  sr.stop = req.stop;
  sr.k = c.k;
  sr.policy.adaptive = c.adaptive;
  sr.policy.draft_max = c.draft_max;
  sr.min_confidence = c.min_confidence;
  sr.max_context = context;
  sr.deadline = req.deadline;
  sr.cancelled = req.cancelled;
  return sr;
}

Event ToEvent(const StepEvent& ev) {
  Event e;
  e.text = ev.text;
  e.token_ids = ev.tokens;
  e.logprobs = ev.logprobs;
  e.k = ev.k;
  e.proposed = ev.proposed;
  e.accepted = ev.accepted;
  e.appended = ev.appended;
  e.emitted = static_cast<int>(ev.tokens.size());
  e.draft_used = ev.draft_used;
  return e;
}

Summary ToSummary(const SpecResult& r, int prompt_tokens, bool adaptive) {
  Summary s;
  s.finish_reason = r.reason;
  s.prompt_tokens = prompt_tokens;
  s.completion_tokens = static_cast<int>(r.tokens.size());
  s.steps = r.stats.steps;
  s.speculative_steps = r.stats.speculative_steps;
  s.proposed = r.stats.proposed;
  s.accepted = r.stats.accepted;
  s.acceptance_rate = r.stats.AcceptanceRate();
  s.mean_accepted_length = r.stats.MeanAcceptedLength();
  s.tokens_per_second = r.TokensPerSecond();
  s.elapsed_seconds = r.stats.elapsed_seconds;
  s.draft_failures = r.stats.draft_failures;
  s.stop = r.stop;
  s.prefill_seconds = r.stats.prefill_seconds;
  s.k_histogram = r.stats.k_hist;
  s.adaptive = adaptive;
  s.step_time = r.stats.time;
  s.step_time_speculative = r.stats.spec_time;
  s.pipelined_steps = r.stats.pipelined_steps;
  s.text = r.text;
  s.tokens = r.tokens;
  s.chunks = r.stats.steps;
  return s;
}

std::string FormatSummary(const Summary& s) {
  std::string out = absl::StrFormat("%d tokens in %.2f s (%.1f tok/s), finish: %s", s.completion_tokens,
                                    s.elapsed_seconds, s.tokens_per_second, FinishReasonName(s.finish_reason));
  if (s.speculative_steps > 0) {
    out += absl::StrFormat("; acceptance %.1f%% (%d/%d), mean accepted length %.2f tokens/step, mean k %.2f",
                           100.0 * s.acceptance_rate, s.accepted, s.proposed, s.mean_accepted_length, s.MeanK());
  } else {
    out += "; target-only";
  }
  if (s.adaptive) {
    // Which lengths the policy chose: what to read first when adaptive trails a fixed k.
    out += "; adaptive k (steps by drafts verified:";
    for (size_t k = 0; k < s.k_histogram.size(); ++k)
      if (s.k_histogram[k] > 0) out += absl::StrFormat(" %d:%d", k, s.k_histogram[k]);
    out += ")";
  }
  if (s.draft_failures > 0) out += absl::StrFormat(" (%d draft failures)", s.draft_failures);
  if (s.time_to_first_token_seconds > 0)
    out += absl::StrFormat("; first token %.0f ms (queue %.0f ms)", 1e3 * s.time_to_first_token_seconds,
                           1e3 * s.queue_seconds);
  if (s.steps > 0) out += "\n" + StepTimeReport(s.step_time, s.steps, s.step_time_speculative, s.speculative_steps);
  if (s.pipelined_steps > 0)
    out += absl::StrFormat("\npipelined verify: %d of %d steps took the proposal from the exchange buffer",
                           s.pipelined_steps, s.steps);
  return out;
}

}  // namespace specd::api
