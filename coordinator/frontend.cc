#include "coordinator/frontend.h"

#include <random>

#include "common/util/log.h"
#include "proto/rpc/convert.h"
#include "proto/rpc/status.h"

namespace specd {
namespace {

constexpr int kMaxStops = 16;
constexpr size_t kMaxStopBytes = 256;
constexpr int kMaxK = 64;

grpc::Status Invalid(const std::string& msg) { return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, msg); }

v1::FinishReason ToProto(FinishReason r) {
  switch (r) {
    case FinishReason::kEos: return v1::FINISH_REASON_EOS;
    case FinishReason::kStop: return v1::FINISH_REASON_STOP;
    case FinishReason::kLength: return v1::FINISH_REASON_LENGTH;
    case FinishReason::kCancelled: return v1::FINISH_REASON_CANCELLED;
    case FinishReason::kDeadline: return v1::FINISH_REASON_DEADLINE;
    default: return v1::FINISH_REASON_UNSPECIFIED;
  }
}

// gRPC reports "no deadline" as a time far in the future.
Deadline RequestDeadline(const grpc::ServerContext* ctx) {
  const Deadline d = ctx->deadline();
  return d - std::chrono::system_clock::now() > std::chrono::hours(24 * 365) ? kNoDeadline : d;
}

// The loop stops a little before the gRPC deadline so that the client still
// receives the final message (finish reason "deadline").
Deadline LoopDeadline(Deadline d) {
  if (d == kNoDeadline) return d;
  const auto left = d - std::chrono::system_clock::now();
  if (left <= std::chrono::system_clock::duration::zero()) return d;
  return d - std::min<std::chrono::system_clock::duration>(std::chrono::milliseconds(200), left / 10);
}

}  // namespace

Frontend::Frontend(Cluster* cluster, const FrontendOptions& opts)
    : cluster_(cluster), opts_(opts), k_(opts.k), enabled_(opts.speculation) {
  // A random start keeps ids apart from sequences a previous coordinator left.
  std::random_device rd;
  next_seq_ = static_cast<int32_t>(rd() & 0x3fffffff) + 1;
}

grpc::Status Frontend::Serve(grpc::ServerContext* ctx, const v1::GenerateRequest& req, const v1::ChatRequest* chat,
                             grpc::ServerWriter<v1::GenerateResponse>* writer) {
  struct Active {
    std::atomic<int64_t>& n;
    explicit Active(std::atomic<int64_t>& a) : n(a) { ++n; }
    ~Active() { --n; }
  } active(active_);
  const Deadline deadline = RequestDeadline(ctx);
  auto cancelled = [ctx] { return ctx->IsCancelled(); };

  // ---- checks that need no worker
  int max_tokens = req.max_tokens() == 0 ? opts_.default_max_tokens : req.max_tokens();
  if (max_tokens < 1 || max_tokens > opts_.max_tokens_limit)
    return Invalid(absl::StrCat("max_tokens ", req.max_tokens(), " out of range [1, ", opts_.max_tokens_limit, "]"));
  if (req.stop_size() > kMaxStops) return Invalid(absl::StrCat("at most ", kMaxStops, " stop strings"));
  for (const std::string& s : req.stop()) {
    if (s.empty() || s.size() > kMaxStopBytes)
      return Invalid(absl::StrCat("stop strings must have 1 to ", kMaxStopBytes, " bytes"));
  }
  auto sampling = rpc::SamplingFromProto(req.sampling());
  if (!sampling.ok()) return rpc::ToGrpc(sampling.status());
  const v1::Speculation& spec = req.speculation();
  if (spec.has_k() && (spec.k() < 0 || spec.k() > kMaxK))
    return Invalid(absl::StrCat("speculation k ", spec.k(), " out of range [0, ", kMaxK, "]"));
  if (!(spec.min_confidence() >= 0.0f && spec.min_confidence() <= 1.0f))
    return Invalid("speculation min_confidence must be in [0, 1]");
  if (chat) {
    if (chat->messages().empty()) return Invalid("chat request without messages");
  } else if (req.prompt().empty() && req.prompt_tokens().empty()) {
    return Invalid("empty prompt");
  }

  std::vector<int32_t> prompt;
  SpecResult r;
  bool wrote = false;
  for (int attempt = 0;; ++attempt) {
    // ---- the target (new requests wait for it, up to their deadline)
    const Deadline wait_until = std::min(deadline, std::chrono::system_clock::now() + opts_.target_wait);
    std::shared_ptr<const TargetView> view = cluster_->WaitTarget(wait_until, cancelled);
    if (!view) {
      if (cancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
      if (std::chrono::system_clock::now() >= deadline)
        return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the target worker did not come up before the deadline");
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          absl::StrCat("the target worker at ", cluster_->options().target_address,
                                       " is not available (waited ", opts_.target_wait.count() / 1000.0, " s)"));
    }
    const Tokenizer& tok = *view->tokenizer;
    if (attempt == 0) {
      if (chat) {
        std::vector<ChatMessage> msgs;
        for (const auto& m : chat->messages()) msgs.push_back({m.role(), m.content()});
        auto text = tok.ApplyChatTemplate(msgs, /*add_generation_prompt=*/true);
        if (!text.ok()) return rpc::ToGrpc(text.status());
        prompt = tok.Encode(*text, /*add_special=*/false, /*parse_special=*/true);
      } else if (!req.prompt_tokens().empty()) {
        prompt = rpc::ToVector(req.prompt_tokens());
        for (int32_t t : prompt) {
          if (t < 0 || t >= view->info.vocab_size())
            return Invalid(absl::StrCat("prompt token id ", t, " out of range [0, ", view->info.vocab_size(), ")"));
        }
      } else {
        prompt = tok.Encode(req.prompt(), req.has_add_special() ? req.add_special() : true, req.parse_special());
      }
      if (prompt.empty()) return Invalid("the prompt encodes to no tokens");
      if (static_cast<int64_t>(prompt.size()) >= view->info.max_seq_len())
        return Invalid(absl::StrCat("prompt of ", prompt.size(), " tokens does not fit the target's context of ",
                                    view->info.max_seq_len(), " positions"));
    }

    if (!Admit(view->info.max_seqs(), deadline, cancelled)) {
      if (cancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          "all sequence slots of the target stayed busy until the deadline");
    }
    struct Admitted {
      Frontend* f;
      ~Admitted() { f->Leave(); }
    } admitted{this};

    SpecRequest sr;
    sr.seq = next_seq_.fetch_add(1);
    if (sr.seq <= 0 || sr.seq > 0x7ffffff0) {
      next_seq_ = 2;
      sr.seq = 1;
    }
    sr.prompt = prompt;
    sr.sampling = *sampling;
    sr.max_tokens = max_tokens;
    sr.ignore_eos = req.ignore_eos();
    sr.stop.assign(req.stop().begin(), req.stop().end());
    if (spec.disable()) {
      sr.k = 0;
    } else if (spec.has_k()) {
      sr.k = spec.k();
    } else {
      sr.live_k = [this] { return LiveK(); };
    }
    sr.min_confidence = spec.min_confidence() > 0 ? spec.min_confidence() : opts_.min_confidence;
    sr.max_context = view->info.max_seq_len();
    sr.deadline = LoopDeadline(deadline);
    sr.cancelled = cancelled;
    sr.draft_retry = opts_.draft_retry;
    GrpcTargetClient target(cluster_, opts_.timeouts);
    GrpcDraftClient draft(cluster_, opts_.timeouts);
    auto on_step = [&](const StepEvent& ev) {
      v1::GenerateResponse m;
      m.set_text(ev.text);
      m.mutable_token_ids()->Add(ev.tokens.begin(), ev.tokens.end());
      v1::StepFigures* f = m.mutable_step();
      f->set_proposed(ev.proposed);
      f->set_accepted(ev.accepted);
      f->set_appended(ev.appended);
      f->set_emitted(static_cast<int32_t>(ev.tokens.size()));
      f->set_draft_used(ev.draft_used);
      wrote = true;
      return writer->Write(m);
    };
    r = RunSpeculative(sr, tok, target, cluster_->has_draft() ? &draft : nullptr, on_step);
    // The target went away before anything was streamed: wait for it again.
    if (r.reason == FinishReason::kError && r.status.code() == absl::StatusCode::kUnavailable && !wrote &&
        attempt < 20 && std::chrono::system_clock::now() < deadline && !cancelled()) {
      SPECD_LOG(INFO) << "target unavailable before the first step; waiting for it" << Kv("seq", sr.seq);
      continue;
    }
    SPECD_LOG(INFO) << "request done" << Kv("seq", sr.seq) << Kv("reason", FinishReasonName(r.reason))
                    << Kv("prompt_tokens", prompt.size()) << Kv("tokens", r.tokens.size())
                    << Kv("steps", r.stats.steps) << Kv("acceptance", r.stats.AcceptanceRate())
                    << Kv("tok_s", r.TokensPerSecond()) << Kv("draft_failures", r.stats.draft_failures)
                    << (r.status.ok() ? Kv("error", "") : Kv("error", r.status.ToString()));
    break;
  }

  Record(r, r.reason == FinishReason::kError);
  switch (r.reason) {
    case FinishReason::kCancelled:
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
    case FinishReason::kError:
      return rpc::ToGrpc(r.status);
    default:
      break;
  }
  v1::GenerateResponse last;
  v1::GenerationSummary* s = last.mutable_summary();
  s->set_finish_reason(ToProto(r.reason));
  s->set_prompt_tokens(static_cast<int32_t>(prompt.size()));
  s->set_completion_tokens(static_cast<int32_t>(r.tokens.size()));
  s->set_steps(r.stats.steps);
  s->set_speculative_steps(r.stats.speculative_steps);
  s->set_proposed(r.stats.proposed);
  s->set_accepted(r.stats.accepted);
  s->set_acceptance_rate(r.stats.AcceptanceRate());
  s->set_mean_accepted_length(r.stats.MeanAcceptedLength());
  s->set_tokens_per_second(r.TokensPerSecond());
  s->set_elapsed_seconds(r.stats.elapsed_seconds);
  s->set_draft_failures(r.stats.draft_failures);
  s->set_stop(r.stop);
  writer->Write(last);
  return grpc::Status::OK;
}

bool Frontend::Admit(int limit, Deadline deadline, const std::function<bool()>& cancelled) {
  std::unique_lock<std::mutex> l(admit_mu_);
  while (running_ >= std::max(limit, 1)) {
    if (cancelled() || std::chrono::system_clock::now() >= deadline) return false;
    // Wake up now and then to poll `cancelled`.
    admit_cv_.wait_until(l, std::min(deadline, std::chrono::system_clock::now() + std::chrono::milliseconds(100)));
  }
  ++running_;
  return true;
}

void Frontend::Leave() {
  {
    std::lock_guard<std::mutex> l(admit_mu_);
    --running_;
  }
  admit_cv_.notify_one();
}

void Frontend::Record(const SpecResult& r, bool failed) {
  std::lock_guard<std::mutex> l(mu_);
  ++requests_;
  if (failed) ++failed_;
  tokens_ += static_cast<int64_t>(r.tokens.size());
  steps_ += r.stats.steps;
  spec_steps_ += r.stats.speculative_steps;
  proposed_ += r.stats.proposed;
  accepted_ += r.stats.accepted;
  spec_appended_ += r.stats.spec_appended;
  draft_failures_ += r.stats.draft_failures;
  seconds_ += r.stats.elapsed_seconds;
}

grpc::Status Frontend::Tokenize(grpc::ServerContext* ctx, const v1::TokenizeRequest& req, v1::TokenizeResponse* resp) {
  const Deadline wait_until = std::min(RequestDeadline(ctx), std::chrono::system_clock::now() + opts_.target_wait);
  std::shared_ptr<const TargetView> view = cluster_->WaitTarget(wait_until, [ctx] { return ctx->IsCancelled(); });
  if (!view) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the target worker (and its tokenizer) is not available");
  for (int32_t id : view->tokenizer->Encode(req.text(), req.add_special(), req.parse_special())) {
    resp->add_token_ids(id);
    resp->add_pieces(view->tokenizer->TokenBytes(id, /*special=*/true));
  }
  return grpc::Status::OK;
}

grpc::Status Frontend::Health(v1::HealthResponse* resp) {
  std::shared_ptr<const TargetView> t = cluster_->target();
  const std::optional<v1::InfoResponse> d = cluster_->draft_info();
  resp->set_serving(t != nullptr);
  resp->set_target_ready(t != nullptr);
  resp->set_draft_ready(cluster_->draft().has_value());
  if (t) resp->set_target_model(t->info.model_name());
  if (d) resp->set_draft_model(d->model_name());
  resp->set_k(k_.load());
  resp->set_speculation_enabled(enabled_.load());
  return grpc::Status::OK;
}

grpc::Status Frontend::Stats(v1::StatsResponse* resp) {
  {
    std::lock_guard<std::mutex> l(mu_);
    resp->set_requests_total(requests_);
    resp->set_requests_failed(failed_);
    resp->set_completion_tokens(tokens_);
    resp->set_steps(steps_);
    resp->set_proposed(proposed_);
    resp->set_accepted(accepted_);
    resp->set_acceptance_rate(proposed_ ? static_cast<double>(accepted_) / proposed_ : 0.0);
    resp->set_mean_accepted_length(spec_steps_ ? static_cast<double>(spec_appended_) / spec_steps_ : 0.0);
    resp->set_tokens_per_second(seconds_ > 0 ? tokens_ / seconds_ : 0.0);
    resp->set_draft_failures(draft_failures_);
  }
  resp->set_requests_active(active_.load());
  resp->set_k(k_.load());
  resp->set_speculation_enabled(enabled_.load());
  resp->set_draft_ready(cluster_->draft().has_value());
  resp->set_target_ready(cluster_->target() != nullptr);
  resp->set_draft_swaps(cluster_->draft_swaps());
  resp->set_draft_reconnects(cluster_->draft_reconnects());
  resp->set_uptime_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  // Live figures (KV use, batches) straight from the workers.
  auto info = [&](v1::Worker::Stub* stub, v1::InfoResponse* out) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + cluster_->options().probe_timeout);
    (void)stub->Info(&ctx, v1::InfoRequest(), out);
  };
  info(&cluster_->target_stub(), resp->mutable_target());
  if (cluster_->draft_stub()) info(cluster_->draft_stub(), resp->mutable_draft());
  return grpc::Status::OK;
}

grpc::Status Frontend::SwapDraft(const v1::SwapDraftRequest& req, v1::SwapDraftResponse* resp) {
  auto info = cluster_->SwapDraft(req.path());
  if (!info.ok()) return rpc::ToGrpc(info.status());
  *resp->mutable_draft() = *info;
  return grpc::Status::OK;
}

grpc::Status Frontend::SetSpeculation(const v1::SetSpeculationRequest& req, v1::SetSpeculationResponse* resp) {
  if (req.has_k() && (req.k() < 1 || req.k() > kMaxK))
    return Invalid(absl::StrCat("k ", req.k(), " out of range [1, ", kMaxK, "] (use enabled=false to turn speculation off)"));
  if (req.has_k()) k_ = req.k();
  if (req.has_enabled()) enabled_ = req.enabled();
  SPECD_LOG(INFO) << "speculation settings" << Kv("k", k_.load()) << Kv("enabled", enabled_.load());
  resp->set_k(k_.load());
  resp->set_enabled(enabled_.load());
  return grpc::Status::OK;
}

}  // namespace specd
