// The coordinator's public and admin services over one shared state: the
// Cluster, the live speculation settings and the request statistics. Each
// Generate/Chat call runs RunSpeculative (common/engine/spec_loop.h) in its
// handler thread with gRPC clients of the two workers; the workers batch the
// concurrent calls.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>

#include "coordinator/cluster.h"
#include "coordinator/grpc_clients.h"
#include "proto/specd.grpc.pb.h"

namespace specd {

struct FrontendOptions {
  int k = 4;
  bool speculation = true;
  float min_confidence = 0.0f;
  int default_max_tokens = 256;
  int max_tokens_limit = 8192;
  std::chrono::milliseconds target_wait{30000};  // longest wait for the target without a deadline
  std::chrono::milliseconds draft_retry{250};
  CallTimeouts timeouts;
};

class Frontend {
 public:
  Frontend(Cluster* cluster, const FrontendOptions& opts);

  // Generate (chat == null) or Chat (prompt rendered from `chat`).
  grpc::Status Serve(grpc::ServerContext* ctx, const v1::GenerateRequest& req, const v1::ChatRequest* chat,
                     grpc::ServerWriter<v1::GenerateResponse>* writer);
  grpc::Status Tokenize(grpc::ServerContext* ctx, const v1::TokenizeRequest& req, v1::TokenizeResponse* resp);
  grpc::Status Health(v1::HealthResponse* resp);
  grpc::Status Stats(v1::StatsResponse* resp);
  grpc::Status SwapDraft(const v1::SwapDraftRequest& req, v1::SwapDraftResponse* resp);
  grpc::Status SetSpeculation(const v1::SetSpeculationRequest& req, v1::SetSpeculationResponse* resp);

 private:
  // The k a request without an override uses now (0 when speculation is off).
  int LiveK() const { return enabled_.load() ? k_.load() : 0; }
  // Admission: at most `limit` requests (the target's sequence slots) run at
  // once; the others queue until a slot frees, their deadline, or a cancel.
  bool Admit(int limit, Deadline deadline, const std::function<bool()>& cancelled);
  void Leave();
  void Record(const SpecResult& r, bool failed);

  Cluster* cluster_;
  FrontendOptions opts_;
  std::atomic<int> k_;
  std::atomic<bool> enabled_;
  std::atomic<int32_t> next_seq_;
  std::atomic<int64_t> active_{0};
  std::mutex admit_mu_;
  std::condition_variable admit_cv_;
  int running_ = 0;
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();

  std::mutex mu_;  // the totals below
  int64_t requests_ = 0, failed_ = 0, tokens_ = 0, steps_ = 0, spec_steps_ = 0, proposed_ = 0, accepted_ = 0,
          spec_appended_ = 0, draft_failures_ = 0;
  double seconds_ = 0;
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
