// The speculative loop's clients over gRPC: one pair per request, talking to
// the workers the Cluster tracks. Per-call timeouts bound every RPC (never
// beyond the request's deadline); failures are reported to the Cluster so it
// re-probes at once.
#pragma once
#include <chrono>

#include "common/spec/proposer.h"
#include "common/spec/verifier.h"
#include "coordinator/cluster.h"

namespace specd {

struct CallTimeouts {
  std::chrono::milliseconds draft{2000};        // Propose
  std::chrono::milliseconds draft_open{30000};  // draft prefill
  std::chrono::milliseconds target{60000};      // Open (prefill) and Verify
  std::chrono::milliseconds release{2000};
};

class GrpcTargetClient : public Verifier {
 public:
  GrpcTargetClient(Cluster* cluster, const CallTimeouts& t) : cluster_(cluster), t_(t) {}
  absl::Status Open(int32_t seq, const std::vector<int32_t>& tokens, const SamplingParams& sampling,
                    Deadline deadline) override;
  absl::StatusOr<Verdict> Verify(int32_t seq, const std::vector<int32_t>& proposal, const ExchangeRef& ref,
                                 const CohortTag& cohort, Deadline deadline) override;
  void Release(int32_t seq) override;
  // An asynchronous Verify with await_proposal set (the target takes the
  // proposal from the exchange buffer); AbandonVerify when it will not come.
  std::unique_ptr<PendingVerdict> VerifyNext(int32_t seq, const ExchangeRef& after, int k, const CohortTag& cohort,
                                             Deadline deadline) override;

 private:
  class Pending;
  absl::Status Failed(const grpc::Status& gs, const char* call, int32_t seq, Deadline deadline,
                      Deadline call_deadline);
  Cluster* cluster_;
  CallTimeouts t_;
};

// Uses the draft only while the Cluster says it is usable, and only in the
// draft epoch the sequence was opened in (ABORTED otherwise: reopen).
class GrpcDraftClient : public Proposer {
 public:
  GrpcDraftClient(Cluster* cluster, const CallTimeouts& t) : cluster_(cluster), t_(t) {}
  absl::Status Open(int32_t seq, const std::vector<int32_t>& tokens, const SamplingParams& sampling,
                    Deadline deadline) override;
  absl::StatusOr<Proposal> Propose(const ProposeRequest& req, Deadline deadline) override;
  void Release(int32_t seq) override;
  // The draft worker publishes every proposal in the sequence's slot.
  bool PublishesEveryProposal() const override { return true; }
  bool BatchesEveryProposal() const override { return true; }

 private:
  absl::Status Failed(const grpc::Status& gs, const char* call, Deadline deadline);
  Cluster* cluster_;
  CallTimeouts t_;
  uint64_t epoch_ = 0;         // the draft epoch the sequence is open in (0: none)
  uint64_t opened_epoch_ = 0;  // the epoch of the last Open attempt
};

}  // namespace specd
