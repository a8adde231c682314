// The coordinator's public and admin services over one shared state: the
// Cluster, the live speculation settings, admission control and the request
// statistics. Each Generate/Chat call is admitted (coordinator/admission.h),
// then runs RunSpeculative (common/spec/loop.h) in its handler thread
// with gRPC clients of the two workers; the workers batch the concurrent
// calls (continuous batching), and adaptive requests share one measured
// cost table (SpecCosts).
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
#include <mutex>

#include "coordinator/admission.h"
#include "coordinator/cluster.h"
#include "coordinator/grpc_clients.h"
#include "coordinator/service_stats.h"
#include "proto/specd.grpc.pb.h"

namespace specd {

struct FrontendOptions {
  int k = 4;                 // fixed mode's drafts per step
  bool speculation = true;
  bool adaptive = true;      // choose k per step (common/spec/policy.h), up to draft_max
  int draft_max = 8;
  float min_confidence = -1.0f;  // the draft stops below this top probability; < 0: 0 fixed, learned adaptive
  std::string acceptance_prior;  // AcceptancePrior::Load text new requests start from (empty: none)
  int max_batch = 0;         // requests running at once (0: the target's sequence slots)
  int max_queue = 64;        // requests waiting for admission; more get RESOURCE_EXHAUSTED
  int max_seq_len = 0;       // per-request context (0: the target's max-seq-len)
  size_t recent_requests = 32;
  int default_max_tokens = 256;
  int max_tokens_limit = 8192;
  std::chrono::milliseconds target_wait{30000};  // longest wait for the target without a deadline
  std::chrono::milliseconds draft_retry{250};
  CallTimeouts timeouts;
};

class Frontend {
 public:
  Frontend(Cluster* cluster, const FrontendOptions& opts);
  // Not OK when the options could not be applied (a bad acceptance prior).
  const absl::Status& status() const { return status_; }

  // Generate (chat == null) or Chat (prompt rendered from `chat`).
  grpc::Status Serve(grpc::ServerContext* ctx, const v1::GenerateRequest& req, const v1::ChatRequest* chat,
                     grpc::ServerWriter<v1::GenerateResponse>* writer);
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

  Cluster* cluster_;
  FrontendOptions opts_;
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
  ServiceStats stats_;
  absl::Status status_;
};

class CoordinatorService final : public v1::Coordinator::Service {
 public:
  explicit CoordinatorService(Frontend* f) : f_(f) {}
  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateResponse>* w) override {
    return f_->Serve(ctx, *req, nullptr, w);
  }
  grpc::Status Chat(grpc::ServerContext* ctx, const v1::ChatRequest* req,
                    grpc::ServerWriter<v1::GenerateResponse>* w) override {
    return f_->Serve(ctx, req->options(), req, w);
  }
  grpc::Status Tokenize(grpc::ServerContext* ctx, const v1::TokenizeRequest* req, v1::TokenizeResponse* r) override {
    return f_->Tokenize(ctx, *req, r);
  }
  grpc::Status Health(grpc::ServerContext*, const v1::HealthRequest*, v1::HealthResponse* r) override {
    return f_->Health(r);
  }

 private:
  Frontend* f_;
};

class AdminService final : public v1::Admin::Service {
 public:
  explicit AdminService(Frontend* f) : f_(f) {}
  grpc::Status Stats(grpc::ServerContext*, const v1::StatsRequest*, v1::StatsResponse* r) override {
    return f_->Stats(r);
  }
  grpc::Status SwapDraft(grpc::ServerContext*, const v1::SwapDraftRequest* req, v1::SwapDraftResponse* r) override {
    return f_->SwapDraft(*req, r);
  }
  grpc::Status SetSpeculation(grpc::ServerContext*, const v1::SetSpeculationRequest* req,
                              v1::SetSpeculationResponse* r) override {
    return f_->SetSpeculation(*req, r);
  }

 private:
  Frontend* f_;
};

}  // namespace specd
