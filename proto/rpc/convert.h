// Conversions between the wire messages and the engine's structures.
#pragma once
#include <cstdint>
#include <vector>

#include "common/api/request.h"
#include "common/engine/engine.h"
#include "common/sampler/sampler.h"
#include "common/shm/exchange.h"
#include "common/spec/loop.h"
#include "proto/specd.pb.h"

namespace specd::rpc {

// Validated: INVALID_ARGUMENT names the bad field.
absl::StatusOr<SamplingParams> SamplingFromProto(const v1::Sampling& s);
void SamplingToProto(const SamplingParams& p, v1::Sampling* s);

void LogprobsToProto(const std::vector<TokenLogprob>& in,
                     google::protobuf::RepeatedPtrField<v1::TokenLogprob>* out);
std::vector<TokenLogprob> LogprobsFromProto(const google::protobuf::RepeatedPtrField<v1::TokenLogprob>& in);

v1::FinishReason FinishReasonToProto(FinishReason r);
FinishReason FinishReasonFromProto(v1::FinishReason r);

// The request API (common/api/request.h) on the wire: Generate and Chat
// carry the same request (Chat: `messages` + the rest in `options`). The
// deadline travels as the call's deadline, not in the message.
void RequestToProto(const api::Request& r, v1::GenerateRequest* out);
void RequestToProto(const api::Request& r, v1::ChatRequest* out);
// `chat` may be null (a Generate call). Sampling is validated.
absl::StatusOr<api::Request> RequestFromProto(const v1::GenerateRequest& req, const v1::ChatRequest* chat);
void EventToProto(const api::Event& e, v1::GenerateResponse* out);
api::Event EventFromProto(const v1::GenerateResponse& m);
void SummaryToProto(const api::Summary& s, v1::GenerationSummary* out);
// Fills the figures; the streamed text and tokens are the caller's to add.
void SummaryFromProto(const v1::GenerationSummary& in, api::Summary* s);

// Sets `req`'s cohort (a ProposeRequest or VerifyRequest); left unset without one.
template <typename Req>
void CohortToProto(const CohortTag& c, Req* req) {
  if (!c.shared()) return;
  req->mutable_cohort()->set_id(c.id);
  req->mutable_cohort()->set_size(c.size);
}
CohortTag CohortFromProto(const v1::Cohort& c);

void LedgerToProto(const MemoryLedger& l, v1::MemoryLedger* out);
void StepTimeToProto(const StepTimes& t, int64_t steps, v1::StepTime* out);
StepTimes StepTimeFromProto(const v1::StepTime& t);
void ExchangeToProto(const ExchangeBuffer& x, v1::ExchangeHandle* out);

// The fields every worker reports about its engine (model, vocabulary,
// ledger, limits, KV use, forward counters).
void EngineInfoToProto(const Engine& e, const std::string& vocab_digest, v1::InfoResponse* out);

template <typename R>
std::vector<int32_t> ToVector(const R& repeated) {
  return std::vector<int32_t>(repeated.begin(), repeated.end());
}

}  // namespace specd::rpc
