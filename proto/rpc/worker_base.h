// What both workers serve the same way: Open, Sync and Release on a host
// (LocalDraft or LocalTarget) that one EngineThread drives. `Service` is the
// worker's generated service (v1::DraftWorker or v1::TargetWorker, which
// declare these calls alike); each worker adds its batched call (Propose or
// Verify), its own calls and Info.
#pragma once
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"

#include "proto/rpc/convert.h"
#include "common/engine/scheduler.h"
#include "proto/rpc/security.h"
#include "proto/rpc/status.h"
#include "proto/specd.grpc.pb.h"

namespace specd::rpc {

template <typename Service, typename Host, typename Job, typename Out>
class WorkerBase : public Service {
 public:
  // Derived classes reset thread_ in their destructor, before their host goes.
  ~WorkerBase() override = default;

  // Replaces a sequence of the same id: a coordinator reopening after a
  // failure must not trip over what it left. The prompt is prefilled in
  // chunks between batches (EngineThread::Prefill), from the round that opens
  // the sequence on, so the other sequences keep stepping meanwhile; the call
  // returns once it is all in.
  grpc::Status Open(grpc::ServerContext* ctx, const v1::OpenRequest* req, v1::OpenResponse* resp) override {
    if (auto st = Authorize(ctx); !st.ok()) return st;
    auto sampling = SamplingFromProto(req->sampling());
    if (!sampling.ok()) return ToGrpc(sampling.status());
    const std::vector<int32_t> tokens = ToVector(req->tokens());
    const int32_t seq = req->seq();
    uint64_t open_id = 0;
    // The sequence opens as an exclusive task whose round starts its prefill.
    absl::Status st = thread_->Prefill(
        seq,
        [&]() -> absl::StatusOr<int64_t> {
          SPECD_RETURN_IF_ERROR(HostReady());
          SPECD_RETURN_IF_ERROR(host().OpenSeq(seq, tokens, *sampling, /*prefill=*/false));
          open_id = host().core().Get(seq)->open_id;
          return host().core().PrefillPending(seq);
        },
        [ctx] { return ctx->IsCancelled(); });
    if (!st.ok()) {
      // Release what this call opened, not a sequence a later Open put there.
      thread_->Run([&] {
        if (!HostReady().ok()) return;
        const SeqState* s = host().core().Get(seq);
        if (s && s->open_id == open_id) host().ReleaseSeq(seq);
      });
      return ToGrpc(st);
    }
    resp->set_length(static_cast<int64_t>(tokens.size()));
    return grpc::Status::OK;
  }
  grpc::Status Sync(grpc::ServerContext* ctx, const v1::SyncRequest* req, v1::SyncResponse* resp) override {
    if (auto st = Authorize(ctx); !st.ok()) return st;
    const std::vector<int32_t> tokens = ToVector(req->tokens());
    return ToGrpc(thread_->Run([&]() -> absl::Status {
      SPECD_RETURN_IF_ERROR(HostReady());
      SPECD_RETURN_IF_ERROR(host().SyncSeq(req->seq(), req->base_len(), tokens));
      resp->set_length(host().core().CommittedLength(req->seq()));
      return absl::OkStatus();
    }));
  }
  grpc::Status Release(grpc::ServerContext* ctx, const v1::ReleaseRequest* req, v1::ReleaseResponse* resp) override {
    if (auto st = Authorize(ctx); !st.ok()) return st;
    resp->set_released(thread_->Run([&] { return HostReady().ok() && host().ReleaseSeq(req->seq()); }));
    return grpc::Status::OK;
  }

  // Whether the engine thread takes a task within `timeout` (the systemd
  // watchdog's liveness check: a hung forward stops the pings).
  bool Responsive(std::chrono::milliseconds timeout) { return thread_ && thread_->Responsive(timeout); }

 protected:
  // The current host (engine thread only), when HostReady() is OK: a draft
  // worker may be between models (its target's weights went away).
  virtual Host& host() = 0;
  virtual absl::Status HostReady() { return absl::OkStatus(); }
  // The scheduler over `batch`, with chunked prefill on the host.
  void StartThread(typename EngineThread<Job, Out>::BatchFn batch, typename EngineThread<Job, Out>::KeyFn key,
                   typename EngineThread<Job, Out>::CohortFn cohort, const SchedulerOptions& opts) {
    thread_ = std::make_unique<EngineThread<Job, Out>>(
        std::move(batch), std::move(key), opts, [this](const std::vector<PrefillRequest>& reqs) {
          if (absl::Status st = HostReady(); !st.ok()) return std::vector<absl::StatusOr<int64_t>>(reqs.size(), st);
          std::vector<PrefillSlice> slices;
          for (const PrefillRequest& r : reqs) slices.push_back(PrefillSlice{static_cast<int32_t>(r.key), r.tokens});
          return host().PrefillSeqs(slices);
        }, std::move(cohort));
  }
  // A batch message holds a cohort's calls, one per sequence: more calls than
  // the worker has sequence slots is a malformed message.
  static grpc::Status CheckBatchCalls(int calls, int max_seqs) {
    if (calls <= max_seqs) return grpc::Status::OK;
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("a batch message of ", calls, " calls; this worker holds at most ", max_seqs,
                                     " sequences (one call each)"));
  }
  // Fills the scheduler's figures into an Info response (any thread).
  void SchedulerInfo(v1::InfoResponse* r) const {
    r->set_batches(thread_->batches());
    r->set_batched_requests(thread_->batched_jobs());
    r->set_max_batch(thread_->max_batch_seen());
    r->set_prefill_tokens(thread_->prefill_tokens());
    r->set_prefill_rounds(thread_->prefill_rounds());
    r->set_prefill_chunk(thread_->options().prefill_chunk);
    r->set_batch_limit(thread_->options().max_batch);
    r->set_cohort_batches(thread_->cohort_batches());
    r->set_cohort_timeouts(thread_->cohort_timeouts());
    r->set_prefill_ahead_rounds(thread_->prefill_ahead_rounds());
    r->set_prefill_ahead_seconds(thread_->prefill_ahead_seconds());
    r->set_handoff_gather_seconds(thread_->handoff_gather_seconds());
    r->set_handoff_start_seconds(thread_->handoff_start_seconds());
    r->set_handoff_back_seconds(thread_->handoff_back_seconds());
  }
  std::unique_ptr<EngineThread<Job, Out>> thread_;
};

}  // namespace specd::rpc
