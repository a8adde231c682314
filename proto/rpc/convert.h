// Conversions between the wire messages and the engine's structures.
#pragma once
#include <cstdint>
#include <vector>

#include "common/engine/engine.h"
#include "common/sampler/sampler.h"
#include "common/shm/exchange.h"
#include "common/spec/loop.h"
#include "proto/specd.pb.h"

namespace specd::rpc {

// Validated: INVALID_ARGUMENT names the bad field.
absl::StatusOr<SamplingParams> SamplingFromProto(const v1::Sampling& s);
void SamplingToProto(const SamplingParams& p, v1::Sampling* s);

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
