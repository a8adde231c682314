// The verifier: the target model scoring a proposal. The loop
// (common/spec/loop.h) is written against this interface; the target in
// process (LocalTarget, common/engine/spec_local.h) and over gRPC
// (GrpcTargetClient, coordinator/grpc_clients.h) implement it.
//
// Verify scores the pending token and x_1..x_k in one forward (k+1
// distributions p_1..p_{k+1}), applies the acceptance rule
// (common/spec/acceptance.h) against the proposal's q, and commits the
// accepted prefix and the correction or bonus token. k = 0 is one
// target-only step.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "common/spec/proposer.h"

namespace specd {

// What a verify cost, as the verifier measured it.
struct VerifyFigures {
  double forward_seconds = 0;  // device time of the forward
  double accept_seconds = 0;   // the target's sampling and the acceptance rule
  double worker_seconds = 0;   // the verifier's own time for the call (host work = worker - forward - accept)
  double call_seconds = 0;     // the call from its arrival to its reply, waits included (0: as worker_seconds)
  double prefill_wait_seconds = 0;  // of the call's wait, behind other requests' prefill slices
  // The forward this verify ran in: its sequences and their tokens scored
  // (each one's proposals + 1); 0: not reported (taken as this one alone).
  int batch_seqs = 0;
  int batch_tokens = 0;
  // The forward did not replay what the backend had prepared for its shape
  // (the CUDA backend ran it eagerly, the shape's first time, or captured its
  // graph): forward_seconds is not what that length costs (SpecCosts).
  bool cold = false;
  // The forward also fed some member's pending prompt tokens (its first
  // step after an open that left them for it): it held more than
  // batch_tokens, so its time is not what that verify costs (VerifyCostCell).
  bool batch_mixed = false;
};

// What one verify decided.
struct Verdict {
  int n_accepted = 0;
  std::vector<int32_t> appended;  // accepted proposals + correction/bonus token
  std::vector<TokenLogprob> logprobs;  // per appended token (when the sampling asks for them)
  VerifyFigures figures;
  // A pipelined verify (VerifyNext): the proposal it took and where.
  std::vector<int32_t> proposal;
  ExchangeRef ref;
};

// A verify started before its proposal is back at the loop (VerifyNext).
class PendingVerdict {
 public:
  virtual ~PendingVerdict() = default;
  // The proposal will not come (its Propose failed): ends the wait, unless
  // the verifier has already taken the proposal (then Wait() is the step).
  virtual void Abandon() = 0;
  // The step. ABORTED: abandoned, or no proposal came in time; the sequence
  // is unchanged.
  virtual absl::StatusOr<Verdict> Wait() = 0;
};

class Verifier {
 public:
  virtual ~Verifier() = default;
  virtual absl::Status Open(int32_t seq, const std::vector<int32_t>& tokens, const SamplingParams& sampling,
                            Deadline deadline) = 0;
  // Verifies `proposal` (possibly empty: one target-only step) whose q rows
  // are at `ref`; `cohort`: the verifies released with this one (cohort.h).
  // A FAILED_PRECONDITION about the proposal leaves the sequence unchanged
  // (the loop then retries target-only).
  virtual absl::StatusOr<Verdict> Verify(int32_t seq, const std::vector<int32_t>& proposal, const ExchangeRef& ref,
                                         const CohortTag& cohort, Deadline deadline) = 0;
  virtual void Release(int32_t seq) = 0;
  // Pipelining: starts a verify of the proposer's next proposal for `seq`,
  // which the verifier takes from exchange slot `after.slot` as soon as a
  // generation past `after.generation` is published there (at most k
  // tokens), so that it need not travel through the loop. nullptr: this
  // verifier cannot (the loop verifies once the proposal is back).
  virtual std::unique_ptr<PendingVerdict> VerifyNext(int32_t /*seq*/, const ExchangeRef& /*after*/, int /*k*/,
                                                     const CohortTag& /*cohort*/, Deadline /*deadline*/) {
    return nullptr;
  }
  // Whether VerifyNext would start a verify now (the loop tells the
  // lockstep gate before it starts the step).
  virtual bool TakesNextProposal() const { return false; }
};

}  // namespace specd
