#include "target_worker/target_service.h"

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
                 [](const LocalTarget::VerifyJob& j) { return static_cast<int64_t>(j.seq); }, opts.scheduler);
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
    return r;
  });
}

grpc::Status TargetService::Info(grpc::ServerContext* ctx, const v1::InfoRequest*, v1::InfoResponse* resp) {
  if (auto st = rpc::Authorize(ctx); !st.ok()) return st;
  *resp = CurrentInfo();
  return grpc::Status::OK;
}

grpc::Status TargetService::Verify(grpc::ServerContext* ctx, const v1::VerifyRequest* req, v1::VerifyResponse* resp) {
  const auto arrived = std::chrono::steady_clock::now();
  if (auto st = rpc::Authorize(ctx); !st.ok()) return st;
  LocalTarget::VerifyJob job{req->seq(), ToVector(req->tokens()), ExchangeRef{req->slot(), req->generation()}};
  auto r = thread_->Submit(std::move(job));
  if (!r.ok()) return ToGrpc(r.status());
  resp->set_accepted(r->step.n_accepted);
  resp->mutable_appended()->Add(r->step.appended.begin(), r->step.appended.end());
  rpc::LogprobsToProto(r->step.logprobs, resp->mutable_logprobs());
  resp->set_length(r->length);
  resp->set_forward_seconds(r->step.figures.forward_seconds);
  resp->set_accept_seconds(r->step.figures.accept_seconds);
  resp->set_worker_seconds(r->step.figures.worker_seconds);
  resp->set_call_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - arrived).count());
  return grpc::Status::OK;
}

grpc::Status TargetService::AttachDraft(grpc::ServerContext* ctx, const v1::AttachDraftRequest* req,
                                        v1::AttachDraftResponse*) {
  if (auto st = rpc::Authorize(ctx); !st.ok()) return st;
  const v1::ExchangeHandle& h = req->exchange();
  std::string path;
  absl::Status st = thread_->Run([&] {
    absl::Status a = target_->Attach(h.kind(), h.name());
    path = target_->exchange_path();
    return a;
  });
  if (st.ok()) {
    SPECD_LOG(INFO) << "draft exchange buffer attached" << Kv("kind", h.kind()) << Kv("name", h.name())
                    << Kv("path", path);
  } else {
    SPECD_LOG(WARN) << "draft exchange buffer refused" << Kv("name", h.name()) << Kv("error", st.ToString());
  }
  return ToGrpc(st);
}

}  // namespace specd
