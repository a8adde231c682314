// The target worker's gRPC service: a LocalTarget (TargetCore + the draft's
// attached exchange buffer) driven by one engine thread. Concurrent Verify
// calls are batched into one TargetCore::Verify (one forward).
#pragma once
#include <memory>
#include <string>

#include "common/engine/spec_local.h"
#include "proto/rpc/engine_thread.h"
#include "proto/specd.grpc.pb.h"

namespace specd {

struct TargetWorkerOptions {
  EngineOptions engine;
  int max_batch = 64;  // sequences per Verify batch
};

class TargetService final : public v1::Worker::Service {
 public:
  static absl::StatusOr<std::unique_ptr<TargetService>> Create(const TargetWorkerOptions& opts);
  ~TargetService() override;

  v1::InfoResponse CurrentInfo();

  grpc::Status Info(grpc::ServerContext*, const v1::InfoRequest*, v1::InfoResponse*) override;
  grpc::Status Open(grpc::ServerContext*, const v1::OpenRequest*, v1::OpenResponse*) override;
  grpc::Status Propose(grpc::ServerContext*, const v1::ProposeRequest*, v1::ProposeResponse*) override;
  grpc::Status Verify(grpc::ServerContext*, const v1::VerifyRequest*, v1::VerifyResponse*) override;
  grpc::Status Sync(grpc::ServerContext*, const v1::SyncRequest*, v1::SyncResponse*) override;
  grpc::Status Release(grpc::ServerContext*, const v1::ReleaseRequest*, v1::ReleaseResponse*) override;
  grpc::Status AttachDraft(grpc::ServerContext*, const v1::AttachDraftRequest*, v1::AttachDraftResponse*) override;
  grpc::Status LoadModel(grpc::ServerContext*, const v1::LoadModelRequest*, v1::LoadModelResponse*) override;

 private:
  struct Verified {
    TargetStep step;
    int64_t length = 0;
  };
  TargetService() = default;
  std::vector<absl::StatusOr<Verified>> RunBatch(const std::vector<LocalTarget::VerifyJob>& jobs);

  TargetWorkerOptions opts_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<LocalTarget> target_;  // engine thread only
  std::unique_ptr<rpc::EngineThread<LocalTarget::VerifyJob, Verified>> thread_;
};

}  // namespace specd
