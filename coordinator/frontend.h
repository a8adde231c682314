// The coordinator's request API (common/api/request.h) and its admin
// services over one shared state: the Cluster, the live speculation
// settings, admission control and the request statistics. Each request is
// admitted (coordinator/admission.h), then runs RunSpeculative
// (common/spec/loop.h) in the caller's thread with gRPC clients of the
// two workers; the workers batch the concurrent calls (continuous batching),
// and adaptive requests share one measured cost table (SpecCosts). The gRPC
// Coordinator service below and the HTTP API (coordinator/http_api.h) are
// adapters over Generate.
//
// Context: a request's context is min(--max-seq-len, the target's); a prompt
// that leaves no room for one token is INVALID_ARGUMENT, and max_tokens is
// clamped to the room left (the request ends with finish reason "length").
// Its KV reservation is prompt + clamped max_tokens positions.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "common/api/request.h"
#include "common/spec/step_gate.h"
#include "coordinator/admission.h"
#include "coordinator/cluster.h"
#include "coordinator/grpc_clients.h"
#include "coordinator/service_stats.h"
#include "proto/rpc/security.h"
#include "proto/specd.grpc.pb.h"

namespace specd {

struct FrontendOptions {
  int k = 4;                 // fixed mode's drafts per step
  bool speculation = true;
  bool adaptive = true;      // choose k per step (common/spec/policy.h), up to draft_max
  int draft_max = 8;
  float min_confidence = -1.0f;  // the draft stops below this top probability; < 0: 0 fixed, learned adaptive
  std::string acceptance_prior;  // AcceptancePrior::Load text new requests start from (empty: none)
  api::ProposerKind proposer = api::ProposerKind::kDraft;  // requests that do not choose their own
  NgramOptions ngram;
  int max_batch = 0;         // requests running at once (0: the target's sequence slots)
  int max_queue = 64;        // requests waiting for admission; more get RESOURCE_EXHAUSTED
  int max_seq_len = 0;       // per-request context (0: the target's max-seq-len)
  size_t recent_requests = 32;
  int default_max_tokens = 256;
  int max_tokens_limit = 8192;
  std::chrono::milliseconds target_wait{30000};  // longest wait for the target without a deadline
  std::chrono::milliseconds draft_retry{250};
  CallTimeouts timeouts;
  bool lockstep = true;      // keep concurrent requests' steps in phase (common/spec/step_gate.h)
  StepGateOptions lockstep_gate;
  bool pipeline_verify = true;  // Verify sent with the Propose (SpecRequest::pipeline_verify)
  // A lockstep cohort's calls to a worker in one message (coordinator/call_gatherer.h),
  // waiting at most batch_calls_wait for the cohort's calls.
  bool batch_calls = true;
  std::chrono::microseconds batch_calls_wait{1000};
  // Run each step shape before serving (common/spec/warmup.h) whenever the
  // workers are new (a target, a draft, a swap); kAuto: where their backends
  // prepare shapes (CUDA graphs).
  WarmupMode warmup = WarmupMode::kAuto;
};

class Frontend : public api::Generator {
 public:
  Frontend(Cluster* cluster, const FrontendOptions& opts);
  ~Frontend() override;
  // Not OK when the options could not be applied (a bad acceptance prior).
  const absl::Status& status() const { return status_; }

  // api::Generator (any thread). Waits for the target (up to the deadline
  // and --target-wait-ms), then for admission.
  absl::StatusOr<api::Summary> Generate(const api::Request& req, const api::EventFn& on_event = {}) override;
  absl::StatusOr<std::vector<int32_t>> Tokenize(const std::string& text, bool add_special = true,
                                                bool parse_special = false) override;
  // The target's model name ("" while it is down).
  std::string ModelName() const;
  bool TargetReady() const { return cluster_->target() != nullptr; }
  bool DraftReady() const { return cluster_->draft().has_value(); }
  // A token's bytes in the target's vocabulary ("" while it is down).
  std::string TokenText(int32_t id) const;

  grpc::Status Tokenize(grpc::ServerContext* ctx, const v1::TokenizeRequest& req, v1::TokenizeResponse* resp);
  grpc::Status Health(v1::HealthResponse* resp);
  grpc::Status Stats(v1::StatsResponse* resp);
  grpc::Status SwapDraft(const v1::SwapDraftRequest& req, v1::SwapDraftResponse* resp);
  grpc::Status SetSpeculation(const v1::SetSpeculationRequest& req, v1::SetSpeculationResponse* resp);
  // The Prometheus text exposition (GET /metrics).
  std::string RenderMetrics() const { return stats_.RenderMetrics(); }

 private:
  // The k a request without an override uses now (0 when speculation is off).
  int LiveK() const { return enabled_.load() ? k_.load() : 0; }
  // The limits in force for a target.
  Admission::Limits LimitsFor(const v1::InfoResponse& target) const;
  int ContextFor(const v1::InfoResponse& target) const;
  void AddCollectors();
  std::shared_ptr<const TargetView> WaitTarget(Deadline deadline, const std::function<bool()>& cancelled);
  absl::Status TargetUnavailable(Deadline deadline, const std::function<bool()>& cancelled) const;
  api::SpecDefaults SpecNow() const;
  std::string LockstepFigures() const;
  // A new sequence id (both workers know a request's sequence by it).
  int32_t NewSeq();
  // The warm-up thread: runs WarmUp whenever the workers it ran for changed.
  void WarmUpLoop();

  Cluster* cluster_;
  FrontendOptions opts_;
  const api::Limits limits_;
  std::atomic<int> k_;
  std::atomic<bool> enabled_;
  std::atomic<bool> adaptive_;
  std::atomic<int> draft_max_;
  std::atomic<int32_t> next_seq_;
  std::atomic<int64_t> active_{0};
  std::atomic<int64_t> next_id_{1};
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  Admission admission_;
  SpecCosts costs_;         // call times measured by every request (adaptive length)
  AcceptancePrior prior_;   // acceptance measured by every adaptive request (its starting estimates)
  SpecCosts ngram_costs_;   // the same two for requests with n-gram proposals alone
  AcceptancePrior ngram_prior_;
  ServiceStats stats_;
  // Every request's steps pass it (null: --lockstep=false).
  std::unique_ptr<StepGate> gate_;
  std::unique_ptr<CallGatherers> gather_;  // lockstep and batch_calls only
  absl::Status status_;
  std::mutex warm_mu_;
  std::condition_variable warm_cv_;
  std::atomic<bool> warm_stop_{false};
  std::thread warm_thread_;
};

// The gRPC Coordinator service: requests and events in their wire form.
class CoordinatorService final : public v1::Coordinator::Service {
 public:
  explicit CoordinatorService(Frontend* f) : f_(f) {}
  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateResponse>* w) override {
    return Serve(ctx, *req, nullptr, w);
  }
  grpc::Status Chat(grpc::ServerContext* ctx, const v1::ChatRequest* req,
                    grpc::ServerWriter<v1::GenerateResponse>* w) override {
    return Serve(ctx, req->options(), req, w);
  }
  grpc::Status Tokenize(grpc::ServerContext* ctx, const v1::TokenizeRequest* req, v1::TokenizeResponse* r) override {
    if (auto st = rpc::Authorize(ctx); !st.ok()) return st;
    return f_->Tokenize(ctx, *req, r);
  }
  grpc::Status Health(grpc::ServerContext* ctx, const v1::HealthRequest*, v1::HealthResponse* r) override {
    if (auto st = rpc::Authorize(ctx); !st.ok()) return st;
    return f_->Health(r);
  }

 private:
  grpc::Status Serve(grpc::ServerContext* ctx, const v1::GenerateRequest& req, const v1::ChatRequest* chat,
                     grpc::ServerWriter<v1::GenerateResponse>* writer);
  Frontend* f_;
};

class AdminService final : public v1::Admin::Service {
 public:
  explicit AdminService(Frontend* f) : f_(f) {}
  grpc::Status Stats(grpc::ServerContext* ctx, const v1::StatsRequest*, v1::StatsResponse* r) override {
    if (auto st = rpc::Authorize(ctx); !st.ok()) return st;
    return f_->Stats(r);
  }
  grpc::Status SwapDraft(grpc::ServerContext* ctx, const v1::SwapDraftRequest* req, v1::SwapDraftResponse* r) override {
    if (auto st = rpc::Authorize(ctx); !st.ok()) return st;
    return f_->SwapDraft(*req, r);
  }
  grpc::Status SetSpeculation(grpc::ServerContext* ctx, const v1::SetSpeculationRequest* req,
                              v1::SetSpeculationResponse* r) override {
    if (auto st = rpc::Authorize(ctx); !st.ok()) return st;
    return f_->SetSpeculation(*req, r);
  }

 private:
  Frontend* f_;
};

}  // namespace specd
