// Proposers: where speculative tokens come from. The loop (common/spec/loop.h)
// is written once against this interface; a draft model in process
// (LocalDraft, common/engine/spec_local.h) and over gRPC (GrpcDraftClient,
// coordinator/grpc_clients.h) implement it, and so can proposers without a
// model (n-gram prompt lookup) or with heads on the target.
//
// A proposer keeps, per sequence, a copy of the committed tokens; each
// Propose first syncs it (committed[:base_len] + new_tokens) and then drafts
// up to k tokens x_1..x_k, each drawn from the proposer's distribution q_i.
// The target's acceptance rule needs q_i(x) for every x: a proposal names
// where those rows are (an exchange-buffer slot), or says that q_i is one-hot
// at x_i (a deterministic proposer, or a draft model decoding greedily), which
// needs no rows at all.
#pragma once
#include <chrono>
#include <cstdint>
#include <vector>

#include "common/sampler/sampler.h"
#include "common/spec/cohort.h"
#include "common/shm/exchange.h"
#include "common/util/status.h"

namespace specd {

// Deadlines are wall-clock, as gRPC's; max() means none.
using Deadline = std::chrono::system_clock::time_point;
constexpr Deadline kNoDeadline = Deadline::max();

struct ProposeRequest {
  int32_t seq = 0;
  // Sync first: the committed sequence becomes committed[:base_len] + new_tokens.
  int64_t base_len = 0;
  std::vector<int32_t> new_tokens;
  int k = 0;                     // tokens to draft at most
  float min_confidence = 0.0f;   // stop before a token the proposer is less sure of (0: always k)
  bool want_confidence = false;  // report each token's confidence (always done when min_confidence > 0)
  CohortTag cohort;              // the lockstep proposals released with this one (cohort.h)
};

// What a proposal cost, as the proposer measured it.
struct ProposeFigures {
  int forwards = 0;             // model forwards run (may exceed the tokens kept: the last one found it unsure)
  double forward_seconds = 0;   // device time of the forwards and their sampling
  double worker_seconds = 0;    // the proposer's own time for the call (host work = worker - forward)
  double call_seconds = 0;      // the call from its arrival to its reply, waits included (0: as worker_seconds)
  double prefill_wait_seconds = 0;  // of the call's wait, behind other requests' prefill slices
  // The forwards this proposal ran in: the sequences that drafted in them
  // and how many forwards ran (its longest member's); 0: not reported (taken
  // as this one alone).
  int batch_seqs = 0;
  int batch_forwards = 0;
  // Some of the forwards did not replay what the backend had prepared
  // (VerifyFigures::cold): forward_seconds is not what that length costs.
  bool cold = false;
  // The batch was not plain drafting: its members ran different numbers of
  // forwards, or one first fed more than a step's one or two tokens
  // (catching up): its time is not what batch_forwards forwards of
  // batch_seqs sequences cost (DraftCostCell).
  bool batch_mixed = false;
};

struct Proposal {
  std::vector<int32_t> tokens;     // x_1..x_k' (k' <= k)
  std::vector<float> confidence;   // per token: the proposer's top probability (empty: not measured)
  // Where q_1..q_k' are. slot >= 0: an exchange-buffer slot (which also says
  // whether its rows are dense or one-hot); slot < 0: q_i is one-hot at x_i.
  ExchangeRef ref;
  ProposeFigures figures;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Opens (or reopens, replacing) `seq` holding `tokens`.
  virtual absl::Status Open(int32_t seq, const std::vector<int32_t>& tokens, const SamplingParams& sampling,
                            Deadline deadline) = 0;
  // Syncs, then proposes. ABORTED means "reopen the sequence now" (the
  // proposer was replaced); other errors make the loop back off.
  virtual absl::StatusOr<Proposal> Propose(const ProposeRequest& req, Deadline deadline) = 0;
  virtual void Release(int32_t seq) = 0;
  // Whether every successful proposal is published in the sequence's
  // exchange slot (the slot of its previous proposal, while the sequence
  // stays open): then a verifier may take it there (Verifier::VerifyNext).
  virtual bool PublishesEveryProposal() const { return false; }
  // Whether every Propose goes to a worker that batches concurrent
  // requests' proposals (then a lockstep cohort's count of them is exact:
  // ProposeRequest::cohort); a chain that may answer from its n-gram member
  // does not say so.
  virtual bool BatchesEveryProposal() const { return false; }
  // Whether Open may run on another thread while the verifier's Open runs (a
  // proposer in another process, or one whose Open touches nothing the
  // verifier's does): the loop then opens the sequence here
  // beside the target's prefill, not after it, and its first step drafts with
  // the lockstep cohort instead of opening alone.
  virtual bool OpensBesideTheTarget() const { return false; }
};

}  // namespace specd
