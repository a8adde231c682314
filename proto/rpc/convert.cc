#include "proto/rpc/convert.h"

#include <unistd.h>

#include <filesystem>

namespace specd::rpc {

absl::StatusOr<SamplingParams> SamplingFromProto(const v1::Sampling& s) {
  SamplingParams p;
  p.temperature = s.temperature();
  p.top_k = s.top_k();
  if (s.has_top_p()) p.top_p = s.top_p();
  p.min_p = s.min_p();
  if (s.has_repetition_penalty()) p.repetition_penalty = s.repetition_penalty();
  if (s.has_repetition_window()) p.repetition_window = s.repetition_window();
  p.seed = s.seed();
  if (s.has_logprobs()) p.logprobs = s.logprobs();
  if (p.temperature < 0) return absl::InvalidArgumentError(absl::StrCat("temperature ", p.temperature, " is negative"));
  SPECD_RETURN_IF_ERROR(p.Validate());
  return p;
}

void SamplingToProto(const SamplingParams& p, v1::Sampling* s) {
  s->set_temperature(p.temperature);
  s->set_top_k(p.top_k);
  s->set_top_p(p.top_p);
  s->set_min_p(p.min_p);
  s->set_repetition_penalty(p.repetition_penalty);
  s->set_repetition_window(p.repetition_window);
  s->set_seed(p.seed);
  if (p.logprobs >= 0) s->set_logprobs(p.logprobs);
}

void LogprobsToProto(const std::vector<TokenLogprob>& in,
                     google::protobuf::RepeatedPtrField<v1::TokenLogprob>* out) {
  for (const TokenLogprob& l : in) {
    v1::TokenLogprob* p = out->Add();
    p->set_token(l.token);
    p->set_logprob(l.logprob);
    p->mutable_top_tokens()->Add(l.top_tokens.begin(), l.top_tokens.end());
    p->mutable_top_logprobs()->Add(l.top_logprobs.begin(), l.top_logprobs.end());
  }
}

std::vector<TokenLogprob> LogprobsFromProto(const google::protobuf::RepeatedPtrField<v1::TokenLogprob>& in) {
  std::vector<TokenLogprob> out;
  for (const v1::TokenLogprob& p : in) {
    out.push_back(TokenLogprob{p.token(), p.logprob(), ToVector(p.top_tokens()),
                               std::vector<float>(p.top_logprobs().begin(), p.top_logprobs().end())});
  }
  return out;
}

v1::FinishReason FinishReasonToProto(FinishReason r) {
  switch (r) {
    case FinishReason::kEos: return v1::FINISH_REASON_EOS;
    case FinishReason::kStop: return v1::FINISH_REASON_STOP;
    case FinishReason::kLength: return v1::FINISH_REASON_LENGTH;
    case FinishReason::kCancelled: return v1::FINISH_REASON_CANCELLED;
    case FinishReason::kDeadline: return v1::FINISH_REASON_DEADLINE;
    default: return v1::FINISH_REASON_UNSPECIFIED;
  }
}

FinishReason FinishReasonFromProto(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_EOS: return FinishReason::kEos;
    case v1::FINISH_REASON_STOP: return FinishReason::kStop;
    case v1::FINISH_REASON_LENGTH: return FinishReason::kLength;
    case v1::FINISH_REASON_CANCELLED: return FinishReason::kCancelled;
    case v1::FINISH_REASON_DEADLINE: return FinishReason::kDeadline;
    default: return FinishReason::kNone;
  }
}

void RequestToProto(const api::Request& r, v1::GenerateRequest* out) {
  out->set_prompt(r.prompt);
  out->mutable_prompt_tokens()->Add(r.prompt_tokens.begin(), r.prompt_tokens.end());
  out->set_add_special(r.add_special);
  out->set_parse_special(r.parse_special);
  out->set_max_tokens(r.max_tokens);
  SamplingToProto(r.sampling, out->mutable_sampling());
  for (const auto& s : r.stop) out->add_stop(s);
  out->set_ignore_eos(r.ignore_eos);
  v1::Speculation* sp = out->mutable_speculation();
  if (r.k) sp->set_k(*r.k);
  if (r.adaptive) sp->set_adaptive(*r.adaptive);
  sp->set_disable(r.disable_speculation);
  sp->set_min_confidence(r.min_confidence);
  if (r.proposer) sp->set_proposer(api::ProposerName(*r.proposer));
}

void RequestToProto(const api::Request& r, v1::ChatRequest* out) {
  for (const ChatMessage& m : r.messages) {
    v1::ChatMessage* cm = out->add_messages();
    cm->set_role(m.role);
    cm->set_content(m.content);
  }
  RequestToProto(r, out->mutable_options());
}

absl::StatusOr<api::Request> RequestFromProto(const v1::GenerateRequest& req, const v1::ChatRequest* chat) {
  api::Request r;
  if (chat) {
    if (chat->messages().empty()) return absl::InvalidArgumentError("chat request without messages");
    for (const auto& m : chat->messages()) r.messages.push_back({m.role(), m.content()});
  } else {
    r.prompt = req.prompt();
    r.prompt_tokens = ToVector(req.prompt_tokens());
    r.add_special = req.has_add_special() ? req.add_special() : true;
    r.parse_special = req.parse_special();
  }
  r.max_tokens = req.max_tokens();
  SPECD_ASSIGN_OR_RETURN(r.sampling, SamplingFromProto(req.sampling()));
  r.stop.assign(req.stop().begin(), req.stop().end());
  r.ignore_eos = req.ignore_eos();
  const v1::Speculation& sp = req.speculation();
  if (sp.has_k()) r.k = sp.k();
  if (sp.has_adaptive()) r.adaptive = sp.adaptive();
  r.disable_speculation = sp.disable();
  r.min_confidence = sp.min_confidence();
  if (!sp.proposer().empty()) {
    SPECD_ASSIGN_OR_RETURN(r.proposer, api::ParseProposer(sp.proposer()));
  }
  return r;
}

void EventToProto(const api::Event& e, v1::GenerateResponse* out) {
  out->set_text(e.text);
  out->mutable_token_ids()->Add(e.token_ids.begin(), e.token_ids.end());
  LogprobsToProto(e.logprobs, out->mutable_logprobs());
  v1::StepFigures* f = out->mutable_step();
  f->set_proposed(e.proposed);
  f->set_accepted(e.accepted);
  f->set_appended(e.appended);
  f->set_emitted(e.emitted);
  f->set_draft_used(e.draft_used);
  f->set_k(e.k);
}

api::Event EventFromProto(const v1::GenerateResponse& m) {
  api::Event e;
  e.text = m.text();
  e.token_ids = ToVector(m.token_ids());
  e.logprobs = LogprobsFromProto(m.logprobs());
  e.k = m.step().k();
  e.proposed = m.step().proposed();
  e.accepted = m.step().accepted();
  e.appended = m.step().appended();
  e.emitted = m.step().emitted();
  e.draft_used = m.step().draft_used();
  return e;
}

void SummaryToProto(const api::Summary& s, v1::GenerationSummary* out) {
  out->set_finish_reason(FinishReasonToProto(s.finish_reason));
  out->set_prompt_tokens(s.prompt_tokens);
  out->set_completion_tokens(s.completion_tokens);
  out->set_steps(s.steps);
  out->set_speculative_steps(s.speculative_steps);
  out->set_proposed(s.proposed);
  out->set_accepted(s.accepted);
  out->set_acceptance_rate(s.acceptance_rate);
  out->set_mean_accepted_length(s.mean_accepted_length);
  out->set_tokens_per_second(s.tokens_per_second);
  out->set_elapsed_seconds(s.elapsed_seconds);
  out->set_draft_failures(s.draft_failures);
  out->set_stop(s.stop);
  out->set_queue_seconds(s.queue_seconds);
  out->set_time_to_first_token_seconds(s.time_to_first_token_seconds);
  for (int64_t n : s.k_histogram) out->add_k_histogram(n);
  out->set_adaptive(s.adaptive);
  out->set_prefill_seconds(s.prefill_seconds);
  StepTimeToProto(s.step_time, s.steps, out->mutable_step_time());
  StepTimeToProto(s.step_time_speculative, s.speculative_steps, out->mutable_step_time_speculative());
  out->set_pipelined_steps(s.pipelined_steps);
}

void SummaryFromProto(const v1::GenerationSummary& in, api::Summary* s) {
  s->finish_reason = FinishReasonFromProto(in.finish_reason());
  s->prompt_tokens = in.prompt_tokens();
  s->completion_tokens = in.completion_tokens();
  s->steps = in.steps();
  s->speculative_steps = in.speculative_steps();
  s->proposed = in.proposed();
  s->accepted = in.accepted();
  s->acceptance_rate = in.acceptance_rate();
  s->mean_accepted_length = in.mean_accepted_length();
  s->tokens_per_second = in.tokens_per_second();
  s->elapsed_seconds = in.elapsed_seconds();
  s->draft_failures = in.draft_failures();
  s->stop = in.stop();
  s->queue_seconds = in.queue_seconds();
  s->time_to_first_token_seconds = in.time_to_first_token_seconds();
  s->prefill_seconds = in.prefill_seconds();
  s->k_histogram.assign(in.k_histogram().begin(), in.k_histogram().end());
  s->adaptive = in.adaptive();
  s->step_time = StepTimeFromProto(in.step_time());
  s->step_time_speculative = StepTimeFromProto(in.step_time_speculative());
  s->pipelined_steps = in.pipelined_steps();
}

void LedgerToProto(const MemoryLedger& l, v1::MemoryLedger* out) {
  out->set_device(l.device);
  out->set_weights(l.weights);
  out->set_kv_pool(l.kv_pool);
  out->set_activations(l.activations);
  out->set_exchange(l.exchange);
  out->set_total(l.total());
  out->set_budget(l.budget);
  out->set_runtime(l.runtime);
  out->set_shared(l.shared);
  out->set_shared_from_pid(l.shared_from);
  out->set_others(l.others);
  out->set_unplanned(l.unplanned);
}

void StepTimeToProto(const StepTimes& t, int64_t steps, v1::StepTime* out) {
  out->set_steps(steps);
  out->set_draft_forward(t.draft_forward);
  out->set_verify_forward(t.verify_forward);
  out->set_accept(t.accept);
  out->set_transport(t.transport);
  out->set_host(t.host);
  out->set_wait(t.wait);
  out->set_wait_draft(t.wait_draft);
  out->set_gate(t.gate);
  out->set_prefill(t.prefill);
}

StepTimes StepTimeFromProto(const v1::StepTime& t) {
  StepTimes s;
  s.draft_forward = t.draft_forward();
  s.verify_forward = t.verify_forward();
  s.accept = t.accept();
  s.transport = t.transport();
  s.host = t.host();
  s.wait = t.wait();
  s.wait_draft = t.wait_draft();
  s.gate = t.gate();
  s.prefill = t.prefill();
  return s;
}

void ExchangeToProto(const ExchangeBuffer& x, v1::ExchangeHandle* out) {
  out->set_kind(x.kind());
  out->set_name(x.name());
  out->set_n_slots(x.n_slots());
  out->set_k_max(x.k_max());
  out->set_vocab(x.vocab());
  out->set_bytes(x.bytes());
}

void EngineInfoToProto(const Engine& e, const std::string& vocab_digest, v1::InfoResponse* out) {
  const std::string& path = e.options().model_path;
  out->set_model_path(path);
  out->set_model_name(e.config().name.empty() ? std::filesystem::path(path).filename().string() : e.config().name);
  out->set_arch(ArchName(e.config().arch));
  out->set_vocab_size(e.vocab_size());
  out->set_vocab_digest(vocab_digest);
  LedgerToProto(e.ledger(), out->mutable_ledger());
  out->set_weight_sharing(e.weight_sharing());
  out->set_pid(getpid());
  out->set_max_seqs(e.options().max_seqs);
  out->set_max_seq_len(e.options().max_seq_len);
  out->set_active_sequences(e.active_sequences());
  out->set_kv_used_blocks(e.kv().used_blocks());
  out->set_kv_total_blocks(e.kv().n_blocks());
  out->set_kv_block_size(e.options().kv_block_size);
  out->set_forwards(e.counters().forwards);
  out->set_forward_tokens(e.counters().tokens);
  out->set_forward_seconds(e.counters().forward_seconds);
  out->set_cold_forwards(e.backend()->ColdRuns());
  out->set_prepares_shapes(e.backend()->PreparesShapes());
}

CohortTag CohortFromProto(const v1::Cohort& c) { return CohortTag{c.id(), c.size()}; }

}  // namespace specd::rpc
