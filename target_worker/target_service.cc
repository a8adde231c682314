#include "target_worker/target_service.h"

#include "common/util/log.h"
#include "proto/rpc/convert.h"
#include "proto/rpc/status.h"

namespace specd {

using rpc::ToGrpc;
using rpc::ToVector;

TargetService::~TargetService() {
  thread_.reset();  // finish queued work before the engine goes
}

absl::StatusOr<std::unique_ptr<TargetService>> TargetService::Create(const TargetWorkerOptions& opts) {
  std::unique_ptr<TargetService> s(new TargetService());
  s->opts_ = opts;
  SPECD_ASSIGN_OR_RETURN(s->engine_, Engine::Create(opts.engine));
  s->target_ = std::make_unique<LocalTarget>(s->engine_.get());
  SPECD_LOG(INFO) << "target model loaded" << Kv("path", opts.engine.model_path)
                  << Kv("vocab", s->engine_->vocab_size());
  SPECD_LOG(INFO) << s->engine_->ledger().ToString();
  TargetService* self = s.get();
  s->thread_ = std::make_unique<rpc::EngineThread<LocalTarget::VerifyJob, Verified>>(
      [self](const std::vector<LocalTarget::VerifyJob>& jobs) { return self->RunBatch(jobs); },
      [](const LocalTarget::VerifyJob& j) { return static_cast<int64_t>(j.seq); }, opts.max_batch);
  return s;
}

std::vector<absl::StatusOr<TargetService::Verified>> TargetService::RunBatch(
    const std::vector<LocalTarget::VerifyJob>& jobs) {
  std::vector<absl::StatusOr<TargetStep>> res = target_->VerifyBatch(jobs);
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
    r.set_batches(thread_->batches());
    r.set_batched_requests(thread_->batched_jobs());
    r.set_max_batch(thread_->max_batch_seen());
    r.set_model_loads(1);
    return r;
  });
}

grpc::Status TargetService::Info(grpc::ServerContext*, const v1::InfoRequest*, v1::InfoResponse* resp) {
  *resp = CurrentInfo();
  return grpc::Status::OK;
}

grpc::Status TargetService::Open(grpc::ServerContext*, const v1::OpenRequest* req, v1::OpenResponse* resp) {
  auto sampling = rpc::SamplingFromProto(req->sampling());
  if (!sampling.ok()) return ToGrpc(sampling.status());
  const std::vector<int32_t> tokens = ToVector(req->tokens());
  return ToGrpc(thread_->Run([&]() -> absl::Status {
    SPECD_RETURN_IF_ERROR(target_->OpenSeq(req->seq(), tokens, *sampling));
    resp->set_length(target_->core().CommittedLength(req->seq()));
    return absl::OkStatus();
  }));
}

grpc::Status TargetService::Propose(grpc::ServerContext*, const v1::ProposeRequest*, v1::ProposeResponse*) {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this is a target worker: Propose is served by the draft worker");
}

grpc::Status TargetService::Verify(grpc::ServerContext*, const v1::VerifyRequest* req, v1::VerifyResponse* resp) {
  LocalTarget::VerifyJob job{req->seq(), ToVector(req->tokens()), ExchangeRef{req->slot(), req->generation()}};
  auto r = thread_->Submit(std::move(job));
  if (!r.ok()) return ToGrpc(r.status());
  resp->set_accepted(r->step.n_accepted);
  for (int32_t t : r->step.appended) resp->add_appended(t);
  resp->set_length(r->length);
  return grpc::Status::OK;
}

grpc::Status TargetService::Sync(grpc::ServerContext*, const v1::SyncRequest* req, v1::SyncResponse* resp) {
  const std::vector<int32_t> tokens = ToVector(req->tokens());
  return ToGrpc(thread_->Run([&]() -> absl::Status {
    SPECD_RETURN_IF_ERROR(target_->SyncSeq(req->seq(), req->base_len(), tokens));
    resp->set_length(target_->core().CommittedLength(req->seq()));
    return absl::OkStatus();
  }));
}

grpc::Status TargetService::Release(grpc::ServerContext*, const v1::ReleaseRequest* req, v1::ReleaseResponse* resp) {
  resp->set_released(thread_->Run([&] { return target_->ReleaseSeq(req->seq()); }));
  return grpc::Status::OK;
}

grpc::Status TargetService::AttachDraft(grpc::ServerContext*, const v1::AttachDraftRequest* req,
                                        v1::AttachDraftResponse*) {
  const v1::ExchangeHandle& h = req->exchange();
  absl::Status st = thread_->Run([&] { return target_->Attach(h.kind(), h.name()); });
  if (st.ok()) {
    SPECD_LOG(INFO) << "draft exchange buffer attached" << Kv("kind", h.kind()) << Kv("name", h.name());
  } else {
    SPECD_LOG(WARN) << "draft exchange buffer refused" << Kv("name", h.name()) << Kv("error", st.ToString());
  }
  return ToGrpc(st);
}

grpc::Status TargetService::LoadModel(grpc::ServerContext*, const v1::LoadModelRequest*, v1::LoadModelResponse*) {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      "the target worker's model is fixed for its lifetime; only the draft is swapped");
}

}  // namespace specd
