// The target worker's gRPC service: a LocalTarget (TargetCore + the draft's
// attached exchange buffer) driven by one engine thread. Concurrent Verify
// calls are batched into one TargetCore::Verify (one forward).
#pragma once
#include <map>
#include <memory>
#include <mutex>
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
  // A cohort's verifies in one message: the pipelined ones' proposals are
  // awaited in turn, then all run in one batch.
  grpc::Status VerifyBatch(grpc::ServerContext*, const v1::VerifyBatchRequest*, v1::VerifyBatchResponse*) override;
  grpc::Status AbandonVerify(grpc::ServerContext*, const v1::AbandonVerifyRequest*,
                             v1::AbandonVerifyResponse*) override;
  grpc::Status AttachDraft(grpc::ServerContext*, const v1::AttachDraftRequest*, v1::AttachDraftResponse*) override;

 private:
  // A pipelined Verify waiting for its proposal.
  struct Await {
    uint64_t after = 0;
    bool abandoned = false;  // under await_mu_
  };
  TargetService() = default;
  LocalTarget& host() override { return *target_; }
  std::vector<absl::StatusOr<Verified>> RunBatch(const std::vector<LocalTarget::VerifyJob>& jobs);
  // A pipelined Verify's wait (on its gRPC thread): fills the job with the
  // proposal the draft publishes, or says why there is none (the wait counts
  // from `arrived`, the call's arrival).
  absl::Status AwaitProposal(grpc::ServerContext* ctx, const v1::VerifyRequest& req,
                             std::chrono::steady_clock::time_point arrived, LocalTarget::VerifyJob* job);
  // One call up to its job: the request read, a pipelined call's proposal
  // taken (noted in `resp`); `*ready` is when its time starts counting.
  absl::StatusOr<LocalTarget::VerifyJob> Prepare(grpc::ServerContext* ctx, const v1::VerifyRequest& req,
                                                 std::chrono::steady_clock::time_point arrived,
                                                 v1::VerifyResponse* resp,
                                                 std::chrono::steady_clock::time_point* ready);

  std::unique_ptr<Engine> engine_;
  std::unique_ptr<LocalTarget> target_;  // engine thread only
  // The attached exchange buffer as the gRPC threads watch it (a mapping of
  // its own: target_'s belongs to the engine thread), and the pipelined
  // Verifies' waits.
  std::mutex await_mu_;
  std::shared_ptr<const ExchangeBuffer> watch_;
  std::map<int32_t, std::shared_ptr<Await>> awaits_;  // by sequence
  std::map<int32_t, uint64_t> taken_;       // the last wait that took its proposal, by sequence (its `after`)
  std::map<int32_t, uint64_t> abandoned_;   // AbandonVerify calls that overtook their Verify
};

}  // namespace specd
