#include "target_worker/target_service.h"

#include <algorithm>
#include <chrono>

#include "common/util/log.h"
#include "proto/rpc/convert.h"
#include "proto/rpc/status.h"

namespace specd {

using rpc::ToGrpc;
using rpc::ToVector;

absl::StatusOr<std::unique_ptr<TargetService>> TargetService::Create(const TargetWorkerOptions& opts) {
  std::unique_ptr<TargetService> s(new TargetService());
  SPECD_ASSIGN_OR_RETURN(s->engine_, Engine::Create(opts.engine));
  s->target_ = std::make_unique<LocalTarget>(s->engine_.get());
  s->target_->set_prefer_host(opts.prefer_host);
  SPECD_LOG(INFO) << "target model loaded" << Kv("path", opts.engine.model_path)
                  << Kv("vocab", s->engine_->vocab_size()) << Kv("weights", s->engine_->weight_sharing());
  SPECD_LOG(INFO) << s->engine_->ledger().ToString();
  TargetService* self = s.get();
  s->StartThread([self](const std::vector<LocalTarget::VerifyJob>& jobs) { return self->RunBatch(jobs); },
                 [](const LocalTarget::VerifyJob& j) { return static_cast<int64_t>(j.seq); },
                 [](const LocalTarget::VerifyJob& j) { return j.cohort; }, opts.scheduler);
  return s;
}

std::vector<absl::StatusOr<Verified>> TargetService::RunBatch(
    const std::vector<LocalTarget::VerifyJob>& jobs) {
  std::vector<absl::StatusOr<Verdict>> res = target_->VerifyBatch(jobs);
  std::vector<absl::StatusOr<Verified>> out;
  out.reserve(res.size());
  for (size_t i = 0; i < res.size(); ++i) {
    if (!res[i].ok()) {
      out.push_back(res[i].status());
      continue;
    }
    out.push_back(Verified{*std::move(res[i]), target_->core().CommittedLength(jobs[i].seq)});
  }
  return out;
}

v1::InfoResponse TargetService::CurrentInfo() {
  return thread_->Run([this] {
    v1::InfoResponse r;
    rpc::EngineInfoToProto(*engine_, target_->vocab_digest(), &r);
    r.set_role("target");
    if (target_->exchange()) rpc::ExchangeToProto(*target_->exchange(), r.mutable_exchange());
    SchedulerInfo(&r);
    r.set_model_loads(1);
    r.set_batch_calls(true);
    return r;
  });
}

grpc::Status TargetService::Info(grpc::ServerContext* ctx, const v1::InfoRequest*, v1::InfoResponse* resp) {
  if (auto st = rpc::Authorize(ctx); !st.ok()) return st;
  *resp = CurrentInfo();
  return grpc::Status::OK;
}

namespace {
// Bounds on the bookkeeping maps of pipelined waits (entries of released
// sequences are never read again; a rare race keeps them).
constexpr size_t kMaxAwaitRecords = 4096;
}  // namespace

absl::Status TargetService::AwaitProposal(grpc::ServerContext* ctx, const v1::VerifyRequest& req,
                                          std::chrono::steady_clock::time_point arrived,
                                          LocalTarget::VerifyJob* job) {
  const int32_t seq = req.seq();
  auto me = std::make_shared<Await>();
  me->after = req.after_generation();
  std::shared_ptr<const ExchangeBuffer> xb;
  {
    std::lock_guard<std::mutex> l(await_mu_);
    if (auto it = abandoned_.find(seq); it != abandoned_.end()) {
      const bool mine = it->second == me->after;
      abandoned_.erase(it);
      if (mine) return absl::AbortedError("pipelined verify abandoned before it arrived (the draft's Propose failed)");
    }
    if (auto it = awaits_.find(seq); it != awaits_.end()) it->second->abandoned = true;  // replaced
    awaits_[seq] = me;
    xb = watch_;
  }
  // Leaves the registry on every way out (unless replaced meanwhile).
  auto leave = [&](absl::Status st) {
    std::lock_guard<std::mutex> l(await_mu_);
    if (auto it = awaits_.find(seq); it != awaits_.end() && it->second == me) awaits_.erase(it);
    if (st.ok()) {
      if (me->abandoned) return absl::AbortedError("pipelined verify abandoned (the draft's Propose failed)");
      if (taken_.size() >= kMaxAwaitRecords) taken_.clear();
      taken_[seq] = me->after;
    }
    return st;
  };
  if (!xb) return leave(absl::FailedPreconditionError("no draft exchange buffer is attached to the target"));
  const int slot = req.slot();
  if (slot < 0 || slot >= xb->n_slots() || req.await_k() < 1)
    return leave(absl::InvalidArgumentError(absl::StrCat("pipelined verify of slot ", slot, " (the buffer has ",
                                                         xb->n_slots(), ") with await_k ", req.await_k())));
  const auto until = arrived + std::chrono::milliseconds(std::min<uint32_t>(req.await_ms(), 60000));
  while (true) {
    const uint64_t seen = xb->Generation(slot);
    if (auto p = xb->PublishedAfter(slot, seq, me->after)) {
      if (static_cast<int>(p->tokens.size()) > req.await_k())
        return leave(absl::FailedPreconditionError(
            absl::StrCat("the draft published ", p->tokens.size(), " tokens; the verify takes at most ", req.await_k())));
      job->tokens = std::move(p->tokens);
      job->ref = p->ref;
      return leave(absl::OkStatus());
    }
    {
      std::lock_guard<std::mutex> l(await_mu_);
      if (me->abandoned) break;
    }
    if (ctx->IsCancelled()) return leave(absl::CancelledError("the pipelined verify was cancelled"));
    if (std::chrono::steady_clock::now() >= until)
      return leave(absl::AbortedError(absl::StrCat("no proposal for sequence ", seq, " in exchange slot ", slot,
                                                   " within ", req.await_ms(), " ms")));
    // Publish wakes it; the timeout bounds the checks above.
    xb->WaitForChange(slot, seen, std::chrono::microseconds(2000));
  }
  return leave(absl::AbortedError("pipelined verify abandoned (the draft's Propose failed)"));
}

grpc::Status TargetService::AbandonVerify(grpc::ServerContext* ctx, const v1::AbandonVerifyRequest* req,
                                          v1::AbandonVerifyResponse* resp) {
  if (auto st = rpc::Authorize(ctx); !st.ok()) return st;
  std::lock_guard<std::mutex> l(await_mu_);
  const int32_t seq = req->seq();
  if (auto it = awaits_.find(seq); it != awaits_.end() && it->second->after == req->after_generation()) {
    it->second->abandoned = true;
    awaits_.erase(it);
    resp->set_abandoned(true);
  } else if (auto t = taken_.find(seq); t != taken_.end() && t->second == req->after_generation()) {
    resp->set_abandoned(false);  // taken: the Verify's reply is the step
  } else {
    // The Verify has not arrived yet: it ends at once when it does.
    if (abandoned_.size() >= kMaxAwaitRecords) abandoned_.clear();
    abandoned_[seq] = req->after_generation();
    resp->set_abandoned(true);
  }
  return grpc::Status::OK;
}

namespace {

void FillVerify(const Verified& r, std::chrono::steady_clock::time_point ready, double behind_prefill,
                v1::VerifyResponse* resp) {
  resp->set_accepted(r.step.n_accepted);
  resp->mutable_appended()->Add(r.step.appended.begin(), r.step.appended.end());
  rpc::LogprobsToProto(r.step.logprobs, resp->mutable_logprobs());
  resp->set_length(r.length);
  const VerifyFigures& f = r.step.figures;
  resp->set_forward_seconds(f.forward_seconds);
  resp->set_accept_seconds(f.accept_seconds);
  resp->set_worker_seconds(f.worker_seconds);
  resp->set_batch_seqs(f.batch_seqs);
  resp->set_batch_tokens(f.batch_tokens);
  resp->set_cold_forward(f.cold);
  resp->set_batch_mixed(f.batch_mixed);
  resp->set_call_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - ready).count());
  resp->set_prefill_wait_seconds(behind_prefill);
}

}  // namespace

absl::StatusOr<LocalTarget::VerifyJob> TargetService::Prepare(grpc::ServerContext* ctx, const v1::VerifyRequest& req,
                                                              std::chrono::steady_clock::time_point arrived,
                                                              v1::VerifyResponse* resp,
                                                              std::chrono::steady_clock::time_point* ready) {
  LocalTarget::VerifyJob job{req.seq(), ToVector(req.tokens()), ExchangeRef{req.slot(), req.generation()},
                             rpc::CohortFromProto(req.cohort())};
  *ready = arrived;
  if (req.await_proposal()) {
    SPECD_RETURN_IF_ERROR(AwaitProposal(ctx, req, arrived, &job));
    // The call's time counts from the proposal's publication (the wait overlapped the draft's work).
    *ready = std::chrono::steady_clock::now();
    resp->mutable_proposed()->Add(job.tokens.begin(), job.tokens.end());
    resp->set_generation(job.ref.generation);
  }
  return job;
}

grpc::Status TargetService::Verify(grpc::ServerContext* ctx, const v1::VerifyRequest* req, v1::VerifyResponse* resp) {
  const auto arrived = std::chrono::steady_clock::now();
  if (auto st = rpc::Authorize(ctx); !st.ok()) return st;
  std::chrono::steady_clock::time_point ready;
  auto job = Prepare(ctx, *req, arrived, resp, &ready);
  if (!job.ok()) return ToGrpc(job.status());
  double behind_prefill = 0;
  auto r = thread_->Submit(*std::move(job), &behind_prefill);
  if (!r.ok()) return ToGrpc(r.status());
  FillVerify(*r, ready, behind_prefill, resp);
  return grpc::Status::OK;
}

grpc::Status TargetService::VerifyBatch(grpc::ServerContext* ctx, const v1::VerifyBatchRequest* req,
                                        v1::VerifyBatchResponse* resp) {
  const auto arrived = std::chrono::steady_clock::now();
  if (auto st = rpc::Authorize(ctx); !st.ok()) return st;
  const int n = req->calls_size();
  if (auto st = CheckBatchCalls(n, engine_->options().max_seqs); !st.ok()) return st;
  std::vector<absl::Status> status(n);
  std::vector<std::chrono::steady_clock::time_point> ready(n);
  std::vector<LocalTarget::VerifyJob> jobs;
  std::vector<int> job_call;  // the call of each job
  for (int i = 0; i < n; ++i) {
    resp->add_replies();
    auto job = Prepare(ctx, req->calls(i), arrived, resp->mutable_replies(i), &ready[i]);
    if (!job.ok()) {
      status[i] = job.status();
      continue;
    }
    jobs.push_back(*std::move(job));
    job_call.push_back(i);
  }
  std::vector<double> behind_prefill;
  std::vector<absl::StatusOr<Verified>> res = thread_->SubmitAll(std::move(jobs), &behind_prefill);
  for (size_t j = 0; j < res.size(); ++j) {
    const int i = job_call[j];
    if (res[j].ok()) FillVerify(*res[j], ready[i], behind_prefill[j], resp->mutable_replies(i));
    else status[i] = res[j].status();
  }
  for (int i = 0; i < n; ++i) rpc::ToCallStatus(status[i], resp->add_status());
  return grpc::Status::OK;
}

grpc::Status TargetService::AttachDraft(grpc::ServerContext* ctx, const v1::AttachDraftRequest* req,
                                        v1::AttachDraftResponse* resp) {
  if (auto st = rpc::Authorize(ctx); !st.ok()) return st;
  const v1::ExchangeHandle& h = req->exchange();
  std::string path;
  absl::Status st = thread_->Run([&] {
    absl::Status a = target_->Attach(h.kind(), h.name());
    path = target_->exchange_path();
    return a;
  });
  if (st.ok()) {
    // The gRPC threads' own mapping, for pipelined verifies.
    auto watch = ExchangeBuffer::Attach(h.kind(), h.name());
    std::lock_guard<std::mutex> l(await_mu_);
    if (watch.ok()) {
      watch_ = std::shared_ptr<const ExchangeBuffer>(std::move(*watch));
      resp->set_pipelined_verify(true);
    } else {
      watch_.reset();
      SPECD_LOG(WARN) << "pipelined verifies are off: mapping the exchange buffer again failed"
                      << Kv("name", h.name()) << Kv("error", watch.status().ToString());
    }
  }
  if (st.ok()) {
    SPECD_LOG(INFO) << "draft exchange buffer attached" << Kv("kind", h.kind()) << Kv("name", h.name())
                    << Kv("path", path);
  } else {
    SPECD_LOG(WARN) << "draft exchange buffer refused" << Kv("name", h.name()) << Kv("error", st.ToString());
  }
  return ToGrpc(st);
}

}  // namespace specd
