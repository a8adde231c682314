// What both workers serve the same way: Open, Sync and Release on a host
// (LocalDraft or LocalTarget) that one EngineThread drives, and the refusal of
// the other worker's calls. Each worker adds its batched call (Propose or
// Verify) and Info.
#pragma once
#include <memory>
#include <vector>

#include "proto/rpc/convert.h"
#include "proto/rpc/engine_thread.h"
#include "proto/rpc/status.h"
#include "proto/specd.grpc.pb.h"

namespace specd::rpc {

template <typename Host, typename Job, typename Out>
class WorkerBase : public v1::Worker::Service {
 public:
  // Derived classes reset thread_ in their destructor, before their host goes.
  ~WorkerBase() override = default;

  // Replaces a sequence of the same id: a coordinator reopening after a
  // failure must not trip over what it left.
  grpc::Status Open(grpc::ServerContext*, const v1::OpenRequest* req, v1::OpenResponse* resp) override {
    auto sampling = SamplingFromProto(req->sampling());
    if (!sampling.ok()) return ToGrpc(sampling.status());
    const std::vector<int32_t> tokens = ToVector(req->tokens());
    return ToGrpc(thread_->Run([&]() -> absl::Status {
      SPECD_RETURN_IF_ERROR(host().OpenSeq(req->seq(), tokens, *sampling));
      resp->set_length(host().core().CommittedLength(req->seq()));
      return absl::OkStatus();
    }));
  }
  grpc::Status Sync(grpc::ServerContext*, const v1::SyncRequest* req, v1::SyncResponse* resp) override {
    const std::vector<int32_t> tokens = ToVector(req->tokens());
    return ToGrpc(thread_->Run([&]() -> absl::Status {
      SPECD_RETURN_IF_ERROR(host().SyncSeq(req->seq(), req->base_len(), tokens));
      resp->set_length(host().core().CommittedLength(req->seq()));
      return absl::OkStatus();
    }));
  }
  grpc::Status Release(grpc::ServerContext*, const v1::ReleaseRequest* req, v1::ReleaseResponse* resp) override {
    resp->set_released(thread_->Run([&] { return host().ReleaseSeq(req->seq()); }));
    return grpc::Status::OK;
  }

 protected:
  static grpc::Status NotHere(const char* what) { return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, what); }
  // The current host (engine thread only).
  virtual Host& host() = 0;
  // Fills the scheduler's figures into an Info response (any thread).
  void SchedulerInfo(v1::InfoResponse* r) const {
    r->set_batches(thread_->batches());
    r->set_batched_requests(thread_->batched_jobs());
    r->set_max_batch(thread_->max_batch_seen());
  }
  std::unique_ptr<EngineThread<Job, Out>> thread_;
};

}  // namespace specd::rpc
