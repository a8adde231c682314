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
}

void LedgerToProto(const MemoryLedger& l, v1::MemoryLedger* out) {
  out->set_device(l.device);
  out->set_weights(l.weights);
  out->set_kv_pool(l.kv_pool);
  out->set_activations(l.activations);
  out->set_exchange(l.exchange);
  out->set_total(l.total());
  out->set_budget(l.budget);
}

void StepTimeToProto(const StepTimes& t, int64_t steps, v1::StepTime* out) {
  out->set_steps(steps);
  out->set_draft_forward(t.draft_forward);
  out->set_verify_forward(t.verify_forward);
  out->set_accept(t.accept);
  out->set_transport(t.transport);
  out->set_host(t.host);
}

StepTimes StepTimeFromProto(const v1::StepTime& t) {
  StepTimes s;
  s.draft_forward = t.draft_forward();
  s.verify_forward = t.verify_forward();
  s.accept = t.accept();
  s.transport = t.transport();
  s.host = t.host();
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
}

}  // namespace specd::rpc
