// The coordinator's view of its two workers.
//
// Two prober threads (one per worker) call Info every probe interval, and at
// once when a request reports a failure. It loads the target's tokenizer on first
// contact, hands the target the draft's exchange buffer (AttachDraft)
// whenever either side is new, and keeps a draft *epoch* that changes when
// the draft's sequences are gone (new draft process, model swap): requests
// then reopen their sequence on the draft.
//
// The draft is *usable* when it answers, its vocabulary is the target's, the
// target has its current buffer attached and no swap is in progress.
// Requests never wait for the draft: when it is not usable they run
// target-only. New requests do wait (up to their deadline) for the target.
#pragma once
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/spec/loop.h"
#include "common/gguf/gguf.h"
#include "common/tokenizer/tokenizer.h"
#include "proto/rpc/security.h"
#include "proto/specd.grpc.pb.h"

namespace specd {

struct ClusterOptions {
  std::string target_address;
  std::string draft_address;  // empty: no draft (target-only service)
  std::string tokenizer_model;  // GGUF with the target's vocabulary; empty: the target's own file
  std::chrono::milliseconds probe_interval{500};
  std::chrono::milliseconds probe_timeout{3000};
  std::chrono::milliseconds swap_timeout{300000};
  rpc::ClientSecurity security;  // key and TLS roots for the workers
};

// The connected target: its Info and the tokenizer loaded from its model.
struct TargetView {
  v1::InfoResponse info;
  std::shared_ptr<const GgufFile> file;  // the tokenizer's source, kept mapped
  std::shared_ptr<const Tokenizer> tokenizer;
};

struct DraftView {
  uint64_t epoch = 0;
  int k_max = 0;
  bool batch_calls = false;  // takes a cohort's proposals in one message (ProposeBatch)
};

class Cluster {
 public:
  // Fails only on an unreadable TLS root file.
  static absl::StatusOr<std::unique_ptr<Cluster>> Create(ClusterOptions opts);
  ~Cluster();
  void Start();

  const ClusterOptions& options() const { return opts_; }
  v1::TargetWorker::Stub& target_stub() { return *target_stub_; }
  v1::DraftWorker::Stub* draft_stub() { return draft_stub_.get(); }
  bool has_draft() const { return draft_stub_ != nullptr; }
  // The target attached the current draft's buffer and takes proposals from
  // it (AttachDraftResponse.pipelined_verify; an older target does not).
  bool target_pipelines() const;
  // The target takes a cohort's verifies in one message (VerifyBatch).
  bool target_batches() const;

  // The target as last seen, or null while it is down.
  std::shared_ptr<const TargetView> target() const;
  // Waits until the target is up; null at `deadline` or when `cancelled`.
  std::shared_ptr<const TargetView> WaitTarget(Deadline deadline, const std::function<bool()>& cancelled);
  // The draft when usable now.
  std::optional<DraftView> draft() const;
  std::optional<v1::InfoResponse> draft_info() const;
  // The current draft epoch, usable or not.
  uint64_t draft_epoch() const;

  // A request saw a worker fail: probe now (the draft is taken out of use
  // at once when it is unreachable or too slow).
  void ReportTargetFailure(const absl::Status& st);
  void ReportDraftFailure(const absl::Status& st);

  // Replaces the draft's model; see Admin.SwapDraft. One at a time.
  absl::StatusOr<v1::InfoResponse> SwapDraft(const std::string& path);

  int64_t draft_swaps() const;
  int64_t draft_reconnects() const;

 private:
  explicit Cluster(ClusterOptions opts) : opts_(std::move(opts)) {}
  void Monitor(void (Cluster::*probe)());
  void ProbeTarget();
  void ProbeDraft();
  void AttachIfNeeded();
  bool DraftUsableLocked() const;
  void Wake();

  ClusterOptions opts_;
  std::unique_ptr<v1::TargetWorker::Stub> target_stub_;
  std::unique_ptr<v1::DraftWorker::Stub> draft_stub_;

  mutable std::mutex mu_;
  std::condition_variable target_cv_;  // target came up
  std::condition_variable wake_cv_;    // monitor: probe now
  uint64_t wake_ = 0;  // bumped to make the probers run now
  bool stop_ = false;
  std::shared_ptr<const TargetView> target_;  // null while down
  std::optional<v1::InfoResponse> draft_info_;  // null while down
  int64_t last_draft_pid_ = 0;        // the draft process and buffer last seen,
  std::string last_exchange_;         // to tell a restart or swap from a hiccup
  bool vocab_warned_ = false;
  bool paused_ = false;               // a swap is in progress
  std::string attached_name_;         // buffer the target has attached ...
  int64_t attached_target_pid_ = 0;   // ... in this target process
  bool attached_pipelines_ = false;   // ... and takes proposals from it (AttachDraftResponse)
  uint64_t epoch_ = 1;
  int64_t swaps_ = 0, reconnects_ = 0;
  std::shared_ptr<const TargetView> tok_cache_;  // the last tokenizer loaded (target prober only)
  std::string tok_error_;                        // why it could not be loaded (target prober only)
  std::mutex swap_mu_;
  std::mutex attach_mu_;
  std::vector<std::thread> monitors_;
};

}  // namespace specd
