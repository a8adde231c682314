// The target worker's gRPC service: a LocalTarget (TargetCore + the draft's
// attached exchange buffer) driven by one engine thread. Concurrent Verify
// calls are batched into one TargetCore::Verify (one forward).
#pragma once
#include <memory>
#include <string>

#include "common/engine/spec_local.h"
#include "proto/rpc/worker_base.h"

namespace specd {

struct TargetWorkerOptions {
  EngineOptions engine;
  SchedulerOptions scheduler;  // batch size, prefill chunk
  bool prefer_host = false;         // --exchange-path host
};

struct Verified {
  Verdict step;
  int64_t length = 0;  // committed tokens after the step
};

class TargetService final
    : public rpc::WorkerBase<v1::TargetWorker::Service, LocalTarget, LocalTarget::VerifyJob, Verified> {
 public:
  static absl::StatusOr<std::unique_ptr<TargetService>> Create(const TargetWorkerOptions& opts);
  ~TargetService() override { thread_.reset(); }  // before the model it runs on goes

  v1::InfoResponse CurrentInfo();

  grpc::Status Info(grpc::ServerContext*, const v1::InfoRequest*, v1::InfoResponse*) override;
  grpc::Status Verify(grpc::ServerContext*, const v1::VerifyRequest*, v1::VerifyResponse*) override;
  grpc::Status AttachDraft(grpc::ServerContext*, const v1::AttachDraftRequest*, v1::AttachDraftResponse*) override;

 private:
  TargetService() = default;
  LocalTarget& host() override { return *target_; }
  std::vector<absl::StatusOr<Verified>> RunBatch(const std::vector<LocalTarget::VerifyJob>& jobs);

  std::unique_ptr<Engine> engine_;
  std::unique_ptr<LocalTarget> target_;  // engine thread only
};

}  // namespace specd
