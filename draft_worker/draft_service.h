// The draft worker's gRPC service: a LocalDraft (DraftCore + exchange
// buffer) driven by one engine thread. Concurrent Propose calls are batched
// into one DraftCore::Propose; LoadModel swaps the model (and buffer) in place.
//
// A model that maps its target's weights (--share-weights auto) is unloaded
// when that target process exits and loaded again when a target is ready on
// the device (common/memory/exporter_watch.h); meanwhile every call is
// UNAVAILABLE with the reason, Info included, so the coordinator runs its
// requests target-only.
#pragma once
#include <atomic>
#include <memory>
#include <string>

#include "common/engine/spec_local.h"
#include "common/memory/exporter_watch.h"
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

class DraftService final : public rpc::WorkerBase<v1::DraftWorker::Service, LocalDraft, ProposeRequest, Proposed> {
 public:
  static absl::StatusOr<std::unique_ptr<DraftService>> Create(const DraftWorkerOptions& opts);
  ~DraftService() override {
    watch_.reset();   // its callbacks run on the engine thread
    thread_.reset();  // before the model it runs on goes
  }

  // Safe from any thread.
  v1::InfoResponse CurrentInfo();

  grpc::Status Info(grpc::ServerContext*, const v1::InfoRequest*, v1::InfoResponse*) override;
  grpc::Status Propose(grpc::ServerContext*, const v1::ProposeRequest*, v1::ProposeResponse*) override;
  // A cohort's proposals in one message, run in one batch.
  grpc::Status ProposeBatch(grpc::ServerContext*, const v1::ProposeBatchRequest*, v1::ProposeBatchResponse*) override;
  grpc::Status LoadModel(grpc::ServerContext*, const v1::LoadModelRequest*, v1::LoadModelResponse*) override;

 private:
  struct Loaded {
    std::unique_ptr<Engine> engine;
    std::unique_ptr<LocalDraft> draft;
    std::string digest;
  };
  explicit DraftService(const DraftWorkerOptions& opts) : opts_(opts) {}
  LocalDraft& host() override { return *cur_.draft; }
  absl::Status HostReady() override;
  // Loads `path`: checks the vocabulary digest first (when `expected` is not
  // empty), plans memory with the exchange buffer included, then creates
  // the engine and the buffer.
  absl::StatusOr<Loaded> Load(const std::string& path, const std::string& expected_digest) const;
  std::vector<absl::StatusOr<Proposed>> RunBatch(const std::vector<ProposeRequest>& jobs);
  void FillInfo(v1::InfoResponse* out) const;  // engine thread only
  // Points the watch at the current model's exporter (engine thread, or
  // before the thread starts); creates the watch when the model maps weights.
  void FollowExporter();
  // ExporterWatch's callbacks (any thread; they run on the engine thread).
  void Unload(const ProcessId& gone);
  absl::StatusOr<ProcessId> Reload();

  DraftWorkerOptions opts_;
  Loaded cur_;  // engine thread only (after Create); empty while unloaded
  std::string path_;           // the model's path (engine thread only)
  std::string unloaded_why_;   // why cur_ is empty (engine thread only)
  std::atomic<int64_t> loads_{0};
  std::unique_ptr<ExporterWatch> watch_;  // null: the model maps nothing that could go away
};

}  // namespace specd
