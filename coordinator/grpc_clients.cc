#include "coordinator/grpc_clients.h"

#include <condition_variable>
#include <mutex>

#include "proto/rpc/convert.h"
#include "proto/rpc/status.h"

namespace specd {
namespace {

// The call's deadline: the request's when that comes first.
Deadline CallDeadline(Deadline request, std::chrono::milliseconds timeout) {
  return std::min(request, std::chrono::system_clock::now() + timeout);
}

// Sets and returns the call's deadline.
Deadline SetDeadline(grpc::ClientContext* ctx, Deadline request, std::chrono::milliseconds timeout) {
  const Deadline d = CallDeadline(request, timeout);
  ctx->set_deadline(d);
  return d;
}

// The points of a step where a member's verify is sent (CallGatherer phases).
constexpr int kVerifyAfterProposal = 0;
constexpr int kVerifyWithProposal = 1;

}  // namespace

CallGatherers::CallGatherers(Cluster* cluster, std::chrono::microseconds wait)
    : verify(BatchSender<v1::VerifyBatchRequest, v1::VerifyBatchResponse, v1::VerifyRequest, v1::VerifyResponse>(
                 [cluster](grpc::ClientContext* ctx, const v1::VerifyBatchRequest* req, v1::VerifyBatchResponse* resp,
                           std::function<void(grpc::Status)> done) {
                   cluster->target_stub().async()->VerifyBatch(ctx, req, resp, std::move(done));
                 }),
             wait),
      propose(BatchSender<v1::ProposeBatchRequest, v1::ProposeBatchResponse, v1::ProposeRequest, v1::ProposeResponse>(
                  [cluster](grpc::ClientContext* ctx, const v1::ProposeBatchRequest* req,
                            v1::ProposeBatchResponse* resp, std::function<void(grpc::Status)> done) {
                    v1::DraftWorker::Stub* stub = cluster->draft_stub();
                    if (!stub) return done(grpc::Status(grpc::StatusCode::UNAVAILABLE, "no draft worker"));
                    stub->async()->ProposeBatch(ctx, req, resp, std::move(done));
                  }),
              wait) {}

// ---------------------------------------------------------------- target

bool GrpcTargetClient::Gathers(const CohortTag& cohort) const {
  return gather_ != nullptr && cohort.shared() && cluster_->target_batches();
}

absl::Status GrpcTargetClient::Failed(const grpc::Status& gs, const char* call, int32_t seq, Deadline deadline,
                                      Deadline call_deadline) {
  // gRPC may report a deadline a hair before this clock reaches it: a call
  // bounded by the request's deadline that ran out is the request's end.
  if (std::chrono::system_clock::now() >= deadline ||
      (gs.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && call_deadline >= deadline))
    return absl::DeadlineExceededError("request deadline reached");
  switch (gs.error_code()) {
    case grpc::StatusCode::NOT_FOUND: {
      absl::Status st = absl::UnavailableError(
          absl::StrCat("target worker lost sequence ", seq, " during ", call, " (it restarted?): ", gs.error_message()));
      cluster_->ReportTargetFailure(st);
      return st;
    }
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    case grpc::StatusCode::UNKNOWN:
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::CANCELLED: {
      absl::Status st =
          absl::UnavailableError(absl::StrCat("target worker unavailable during ", call, ": ", gs.error_message()));
      cluster_->ReportTargetFailure(st);
      return st;
    }
    default:
      return rpc::FromGrpc(gs);
  }
}

absl::Status GrpcTargetClient::Open(int32_t seq, const std::vector<int32_t>& tokens, const SamplingParams& sampling,
                                    Deadline deadline) {
  v1::OpenRequest req;
  req.set_seq(seq);
  req.mutable_tokens()->Add(tokens.begin(), tokens.end());
  rpc::SamplingToProto(sampling, req.mutable_sampling());
  v1::OpenResponse resp;
  grpc::ClientContext ctx;
  const Deadline call_deadline = SetDeadline(&ctx, deadline, t_.target);
  const grpc::Status gs = cluster_->target_stub().Open(&ctx, req, &resp);
  return gs.ok() ? absl::OkStatus() : Failed(gs, "Open", seq, deadline, call_deadline);
}

namespace {

Verdict VerdictFromProto(const v1::VerifyResponse& resp) {
  return Verdict{resp.accepted(),
                 rpc::ToVector(resp.appended()),
                 rpc::LogprobsFromProto(resp.logprobs()),
                 VerifyFigures{resp.forward_seconds(), resp.accept_seconds(), resp.worker_seconds(), resp.call_seconds(),
                               resp.prefill_wait_seconds(), resp.batch_seqs(), resp.batch_tokens(), resp.cold_forward(),
                               resp.batch_mixed()},
                 rpc::ToVector(resp.proposed()),
                 {}};
}

}  // namespace

absl::StatusOr<Verdict> GrpcTargetClient::Verify(int32_t seq, const std::vector<int32_t>& proposal,
                                                 const ExchangeRef& ref, const CohortTag& cohort, Deadline deadline) {
  v1::VerifyRequest req;
  req.set_seq(seq);
  req.mutable_tokens()->Add(proposal.begin(), proposal.end());
  req.set_slot(ref.slot);
  req.set_generation(ref.generation);
  rpc::CohortToProto(cohort, &req);
  const Deadline call_deadline = CallDeadline(deadline, t_.target);
  if (Gathers(cohort)) {
    auto c = gather_->verify.Add(cohort, kVerifyAfterProposal, std::move(req), call_deadline);
    const grpc::Status gs = gather_->verify.Wait(c);
    if (!gs.ok()) return Failed(gs, "Verify", seq, deadline, call_deadline);
    return VerdictFromProto(c->resp);
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(call_deadline);
  v1::VerifyResponse resp;
  const grpc::Status gs = cluster_->target_stub().Verify(&ctx, req, &resp);
  if (!gs.ok()) return Failed(gs, "Verify", seq, deadline, call_deadline);
  return VerdictFromProto(resp);
}

// The pipelined Verify in flight, alone (the callback fills the reply; the
// destructor waits for it: the call refers to this object) or in its
// cohort's message (the gatherer owns the call).
class GrpcTargetClient::Pending final : public PendingVerdict {
 public:
  Pending(GrpcTargetClient* client, int32_t seq, const ExchangeRef& after, Deadline deadline)
      : client_(client), seq_(seq), after_(after), deadline_(deadline) {}
  ~Pending() override {
    if (gathered_) {
      // Its message cannot be cancelled for one call: tell the target to end
      // the wait, unless the step already read the verdict.
      if (!waited_) Abandon();
      return;
    }
    std::unique_lock<std::mutex> l(mu_);
    if (!done_) ctx_.TryCancel();
    cv_.wait(l, [&] { return done_; });
  }
  void Start(int k, const CohortTag& cohort) {
    v1::VerifyRequest req;
    req.set_seq(seq_);
    rpc::CohortToProto(cohort, &req);
    req.set_slot(after_.slot);
    req.set_await_proposal(true);
    req.set_after_generation(after_.generation);
    req.set_await_k(k);
    // As long as the Propose may take; the loop abandons the wait sooner when the Propose fails.
    req.set_await_ms(static_cast<uint32_t>(client_->t_.draft.count()));
    call_deadline_ = SetDeadline(&ctx_, deadline_, client_->t_.target + client_->t_.draft);
    if (client_->Gathers(cohort)) {
      gathered_ = client_->gather_->verify.Add(cohort, kVerifyWithProposal, std::move(req), call_deadline_);
      return;
    }
    req_ = std::move(req);
    client_->cluster_->target_stub().async()->Verify(&ctx_, &req_, &resp_, [this](grpc::Status gs) {
      std::lock_guard<std::mutex> l(mu_);
      status_ = std::move(gs);
      done_ = true;
      cv_.notify_all();
    });
  }
  void Abandon() override {
    v1::AbandonVerifyRequest req;
    req.set_seq(seq_);
    req.set_after_generation(after_.generation);
    v1::AbandonVerifyResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx, kNoDeadline, client_->t_.release);
    // When the target cannot be told, stop waiting for it (the step then
    // fails as the target would); a gathered call ends with its message.
    if (!client_->cluster_->target_stub().AbandonVerify(&ctx, req, &resp).ok() && !gathered_) ctx_.TryCancel();
  }
  absl::StatusOr<Verdict> Wait() override {
    const v1::VerifyResponse* resp = &resp_;
    if (gathered_) {
      status_ = client_->gather_->verify.Wait(gathered_);
      waited_ = true;
      resp = &gathered_->resp;
    } else {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return done_; });
    }
    // ABORTED: the target did not take the proposal and changed nothing.
    if (status_.error_code() == grpc::StatusCode::ABORTED) return rpc::FromGrpc(status_);
    if (!status_.ok()) return client_->Failed(status_, "Verify", seq_, deadline_, call_deadline_);
    Verdict v = VerdictFromProto(*resp);
    v.ref = ExchangeRef{after_.slot, resp->generation()};
    return v;
  }

 private:
  GrpcTargetClient* client_;
  const int32_t seq_;
  const ExchangeRef after_;
  const Deadline deadline_;
  Deadline call_deadline_ = kNoDeadline;
  VerifyGatherer::CallPtr gathered_;
  bool waited_ = false;  // Wait() ran (gathered)
  grpc::ClientContext ctx_;
  v1::VerifyRequest req_;
  v1::VerifyResponse resp_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  grpc::Status status_;
};

std::unique_ptr<PendingVerdict> GrpcTargetClient::VerifyNext(int32_t seq, const ExchangeRef& after, int k,
                                                             const CohortTag& cohort, Deadline deadline) {
  if (after.slot < 0 || k < 1) return nullptr;
  // A target that does not say it pipelines (an older build, or one that
  // could not map the buffer) would take the call for a target-only step.
  if (!cluster_->target_pipelines()) return nullptr;
  auto p = std::make_unique<Pending>(this, seq, after, deadline);
  p->Start(k, cohort);
  return p;
}

void GrpcTargetClient::Release(int32_t seq) {
  v1::ReleaseRequest req;
  req.set_seq(seq);
  v1::ReleaseResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, kNoDeadline, t_.release);
  (void)cluster_->target_stub().Release(&ctx, req, &resp);
}

// ---------------------------------------------------------------- draft

absl::Status GrpcDraftClient::Failed(const grpc::Status& gs, const char* call, Deadline deadline) {
  absl::Status st = rpc::FromGrpc(gs);
  // Running out of the request's own time says nothing about the draft.
  if (std::chrono::system_clock::now() < deadline) cluster_->ReportDraftFailure(st);
  return absl::Status(st.code(), absl::StrCat("draft ", call, ": ", st.message()));
}

absl::Status GrpcDraftClient::Open(int32_t seq, const std::vector<int32_t>& tokens, const SamplingParams& sampling,
                                   Deadline deadline) {
  epoch_ = 0;
  const std::optional<DraftView> d = cluster_->draft();
  if (!d || !cluster_->draft_stub()) return absl::UnavailableError("the draft worker is not available");
  opened_epoch_ = d->epoch;  // even if the call fails: it may have happened there
  v1::OpenRequest req;
  req.set_seq(seq);
  req.mutable_tokens()->Add(tokens.begin(), tokens.end());
  rpc::SamplingToProto(sampling, req.mutable_sampling());
  v1::OpenResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, deadline, t_.draft_open);
  const grpc::Status gs = cluster_->draft_stub()->Open(&ctx, req, &resp);
  if (!gs.ok()) return Failed(gs, "Open", deadline);
  epoch_ = d->epoch;
  return absl::OkStatus();
}

absl::StatusOr<Proposal> GrpcDraftClient::Propose(const ProposeRequest& pr, Deadline deadline) {
  const std::optional<DraftView> d = cluster_->draft();
  if (!d) return absl::UnavailableError("the draft worker is not available");
  if (d->epoch != epoch_) return absl::AbortedError("the draft was replaced since the sequence was opened");
  v1::ProposeRequest req;
  req.set_seq(pr.seq);
  req.set_base_len(pr.base_len);
  req.mutable_new_tokens()->Add(pr.new_tokens.begin(), pr.new_tokens.end());
  req.set_k(std::min(pr.k, d->k_max));
  req.set_min_confidence(pr.min_confidence);
  req.set_want_confidence(pr.want_confidence);
  rpc::CohortToProto(pr.cohort, &req);
  v1::ProposeResponse resp;
  const Deadline call_deadline = CallDeadline(deadline, t_.draft);
  grpc::Status gs;
  if (gather_ != nullptr && pr.cohort.shared() && d->batch_calls) {
    auto c = gather_->propose.Add(pr.cohort, 0, std::move(req), call_deadline);
    gs = gather_->propose.Wait(c);
    if (gs.ok()) resp = std::move(c->resp);  // (not before: a call past its deadline may still be answered)
  } else {
    grpc::ClientContext ctx;
    ctx.set_deadline(call_deadline);
    gs = cluster_->draft_stub()->Propose(&ctx, req, &resp);
  }
  if (!gs.ok()) return Failed(gs, "Propose", deadline);
  Proposal p;
  p.tokens = rpc::ToVector(resp.tokens());
  p.confidence.assign(resp.confidences().begin(), resp.confidences().end());
  p.ref = ExchangeRef{resp.slot(), resp.generation()};
  p.figures = ProposeFigures{resp.forwards(),       resp.forward_seconds(), resp.worker_seconds(),
                             resp.call_seconds(),   resp.prefill_wait_seconds(), resp.batch_seqs(),
                             resp.batch_forwards(), resp.cold_forward(),   resp.batch_mixed()};
  return p;
}

void GrpcDraftClient::Release(int32_t seq) {
  // Skipped when the draft epoch changed since the last Open: the sequence
  // went with the old process or model. Tried even while the draft is out of
  // use (a slow draft still holds the sequence).
  if (opened_epoch_ == 0 || opened_epoch_ != cluster_->draft_epoch() || !cluster_->draft_stub()) return;
  v1::ReleaseRequest req;
  req.set_seq(seq);
  v1::ReleaseResponse resp;
  grpc::ClientContext ctx;
  SetDeadline(&ctx, kNoDeadline, t_.release);
  (void)cluster_->draft_stub()->Release(&ctx, req, &resp);
}

}  // namespace specd
