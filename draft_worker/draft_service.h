// The draft worker's gRPC service: a LocalDraft (DraftCore + exchange
// buffer) driven by one engine thread. Concurrent Propose calls are batched
// into one DraftCore::Propose; LoadModel swaps the model (and buffer) in place.
#pragma once
#include <atomic>
#include <memory>
#include <string>

#include "common/engine/spec_local.h"
#include "proto/rpc/worker_base.h"

namespace specd {

struct DraftWorkerOptions {
  EngineOptions engine;
  int k_max = 8;
  std::string shm_kind = "auto";  // LocalDraft::Create's kinds
  SchedulerOptions scheduler;  // batch size, prefill chunk
};

struct Proposed {
  Proposal proposal;
  int64_t length = 0;  // committed tokens after the sync
};

class DraftService final : public rpc::WorkerBase<LocalDraft, ProposeRequest, Proposed> {
 public:
  static absl::StatusOr<std::unique_ptr<DraftService>> Create(const DraftWorkerOptions& opts);
  ~DraftService() override { thread_.reset(); }  // before the model it runs on goes

  // Safe from any thread.
  v1::InfoResponse CurrentInfo();

  grpc::Status Info(grpc::ServerContext*, const v1::InfoRequest*, v1::InfoResponse*) override;
  grpc::Status Propose(grpc::ServerContext*, const v1::ProposeRequest*, v1::ProposeResponse*) override;
  grpc::Status Verify(grpc::ServerContext*, const v1::VerifyRequest*, v1::VerifyResponse*) override {
    return NotHere("this is a draft worker: Verify is served by the target worker");
  }
  grpc::Status AttachDraft(grpc::ServerContext*, const v1::AttachDraftRequest*, v1::AttachDraftResponse*) override {
    return NotHere("this is a draft worker: AttachDraft is for the target worker");
  }
  grpc::Status LoadModel(grpc::ServerContext*, const v1::LoadModelRequest*, v1::LoadModelResponse*) override;

 private:
  struct Loaded {
    std::unique_ptr<Engine> engine;
    std::unique_ptr<LocalDraft> draft;
    std::string digest;
  };
  explicit DraftService(const DraftWorkerOptions& opts) : opts_(opts) {}
  LocalDraft& host() override { return *cur_.draft; }
  // Loads `path`: checks the vocabulary digest first (when `expected` is not
  // empty), plans memory with the exchange buffer included, then creates
  // the engine and the buffer.
  absl::StatusOr<Loaded> Load(const std::string& path, const std::string& expected_digest) const;
  std::vector<absl::StatusOr<Proposed>> RunBatch(const std::vector<ProposeRequest>& jobs);
  void FillInfo(v1::InfoResponse* out) const;  // engine thread only

  DraftWorkerOptions opts_;
  Loaded cur_;  // engine thread only (after Create)
  std::atomic<int64_t> loads_{0};
};

}  // namespace specd
