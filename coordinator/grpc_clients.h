// The speculative loop's clients over gRPC: one pair per request, talking to
// the workers the Cluster tracks. Per-call timeouts bound every RPC (never
// beyond the request's deadline); failures are reported to the Cluster so it
// re-probes at once.
#pragma once
#include <chrono>

#include "common/spec/proposer.h"
#include "common/spec/verifier.h"
#include "coordinator/call_gatherer.h"
#include "coordinator/cluster.h"

namespace specd {

using VerifyGatherer = CallGatherer<v1::VerifyRequest, v1::VerifyResponse>;
using ProposeGatherer = CallGatherer<v1::ProposeRequest, v1::ProposeResponse>;

// The coordinator's gatherers of lockstep calls, one per worker, shared by
// every request's clients; used while the worker says it takes batch
// messages (InfoResponse.batch_calls).
struct CallGatherers {
  CallGatherers(Cluster* cluster, std::chrono::microseconds wait);
  VerifyGatherer verify;
  ProposeGatherer propose;
};

struct CallTimeouts {
  std::chrono::milliseconds draft{2000};        // Propose
  std::chrono::milliseconds draft_open{30000};  // draft prefill
  std::chrono::milliseconds target{60000};      // Open (prefill) and Verify
  std::chrono::milliseconds release{2000};
};

class GrpcTargetClient : public Verifier {
 public:
  // `gather` may be null: every call goes alone.
  GrpcTargetClient(Cluster* cluster, const CallTimeouts& t, CallGatherers* gather = nullptr)
      : cluster_(cluster), t_(t), gather_(gather) {}
  absl::Status Open(int32_t seq, const std::vector<int32_t>& tokens, const SamplingParams& sampling,
                    Deadline deadline) override;
  absl::StatusOr<Verdict> Verify(int32_t seq, const std::vector<int32_t>& proposal, const ExchangeRef& ref,
                                 const CohortTag& cohort, Deadline deadline) override;
  void Release(int32_t seq) override;
  // An asynchronous Verify with await_proposal set (the target takes the
  // proposal from the exchange buffer); AbandonVerify when it will not come.
  std::unique_ptr<PendingVerdict> VerifyNext(int32_t seq, const ExchangeRef& after, int k, const CohortTag& cohort,
                                             Deadline deadline) override;
  bool TakesNextProposal() const override { return cluster_->target_pipelines(); }

 private:
  class Pending;
  absl::Status Failed(const grpc::Status& gs, const char* call, int32_t seq, Deadline deadline,
                      Deadline call_deadline);
  // Whether a call of `cohort` goes through the gatherer.
  bool Gathers(const CohortTag& cohort) const;
  Cluster* cluster_;
  CallTimeouts t_;
  CallGatherers* gather_;
};

// Uses the draft only while the Cluster says it is usable, and only in the
// draft epoch the sequence was opened in (ABORTED otherwise: reopen).
class GrpcDraftClient : public Proposer {
 public:
  GrpcDraftClient(Cluster* cluster, const CallTimeouts& t, CallGatherers* gather = nullptr)
      : cluster_(cluster), t_(t), gather_(gather) {}
  absl::Status Open(int32_t seq, const std::vector<int32_t>& tokens, const SamplingParams& sampling,
                    Deadline deadline) override;
  absl::StatusOr<Proposal> Propose(const ProposeRequest& req, Deadline deadline) override;
  void Release(int32_t seq) override;
  // The draft worker publishes every proposal in the sequence's slot.
  bool PublishesEveryProposal() const override { return true; }
  bool BatchesEveryProposal() const override { return true; }
  // The draft worker prefills the prompt beside the target worker's prefill.
  bool OpensBesideTheTarget() const override { return true; }

 private:
  absl::Status Failed(const grpc::Status& gs, const char* call, Deadline deadline);
  Cluster* cluster_;
  CallTimeouts t_;
  CallGatherers* gather_;
  uint64_t epoch_ = 0;         // the draft epoch the sequence is open in (0: none)
  uint64_t opened_epoch_ = 0;  // the epoch of the last Open attempt
};

}  // namespace specd
