#include "coordinator/client/client.h"

#include <grpcpp/grpcpp.h>

#include <sstream>
#include <thread>

#include "common/util/config.h"
#include "proto/rpc/convert.h"
#include "proto/rpc/security.h"
#include "proto/rpc/status.h"
#include "proto/specd.grpc.pb.h"

namespace specd::client {
namespace {

void SetTimeout(grpc::ClientContext* ctx, std::chrono::milliseconds t) {
  if (t.count() > 0) ctx->set_deadline(std::chrono::system_clock::now() + t);
}

WorkerStats FromInfo(const v1::InfoResponse& i, bool reachable) {
  WorkerStats w;
  w.reachable = reachable;
  w.role = i.role();
  w.model_name = i.model_name();
  w.model_path = i.model_path();
  w.arch = i.arch();
  w.vocab_digest = i.vocab_digest();
  w.exchange = i.exchange().name();
  w.pid = i.pid();
  w.vocab_size = i.vocab_size();
  w.max_seqs = i.max_seqs();
  w.max_seq_len = i.max_seq_len();
  w.active_sequences = i.active_sequences();
  w.kv_used_blocks = i.kv_used_blocks();
  w.kv_total_blocks = i.kv_total_blocks();
  w.forwards = i.forwards();
  w.batches = i.batches();
  w.batched_requests = i.batched_requests();
  w.cohort_batches = i.cohort_batches();
  w.cohort_timeouts = i.cohort_timeouts();
  w.prefill_ahead_rounds = i.prefill_ahead_rounds();
  w.prefill_ahead_seconds = i.prefill_ahead_seconds();
  w.handoff_gather_seconds = i.handoff_gather_seconds();
  w.handoff_start_seconds = i.handoff_start_seconds();
  w.handoff_back_seconds = i.handoff_back_seconds();
  w.cold_forwards = i.cold_forwards();
  w.model_loads = i.model_loads();
  w.max_batch = i.max_batch();
  w.memory_total = i.ledger().total();
  w.memory_budget = i.ledger().budget();
  w.memory_weights = i.ledger().weights();
  w.memory_kv = i.ledger().kv_pool();
  w.memory_activations = i.ledger().activations();
  w.memory_exchange = i.ledger().exchange();
  w.memory_runtime = i.ledger().runtime();
  w.memory_unplanned = i.ledger().unplanned();
  w.memory_shared = i.ledger().shared();
  w.memory_shared_from = i.ledger().shared_from_pid();
  w.memory_others = i.ledger().others();
  w.weight_sharing = i.weight_sharing();
  w.forward_tokens = i.forward_tokens();
  w.prefill_tokens = i.prefill_tokens();
  w.forward_seconds = i.forward_seconds();
  w.prefill_chunk = i.prefill_chunk();
  w.batch_limit = i.batch_limit();
  return w;
}

}  // namespace

struct Client::Impl {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Coordinator::Stub> api;
  std::unique_ptr<v1::Admin::Stub> admin;
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& address, const ConnectOptions& opts) {
  if (address.empty()) return absl::InvalidArgumentError("empty coordinator address");
  auto impl = std::make_unique<Impl>();
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  SPECD_ASSIGN_OR_RETURN(impl->channel, rpc::MakeChannel(address, rpc::ClientSecurity{opts.api_key, opts.tls_ca}, args));
  if (!impl->channel) return absl::InvalidArgumentError(absl::StrCat("bad coordinator address '", address, "'"));
  impl->api = v1::Coordinator::NewStub(impl->channel);
  impl->admin = v1::Admin::NewStub(impl->channel);
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

absl::StatusOr<api::Summary> Client::Generate(const api::Request& req, const api::EventFn& on_event) {
  grpc::ClientContext ctx;
  if (req.deadline != kNoDeadline) ctx.set_deadline(req.deadline);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader;
  if (!req.messages.empty()) {
    v1::ChatRequest chat;
    rpc::RequestToProto(req, &chat);
    reader = impl_->api->Chat(&ctx, chat);
  } else {
    v1::GenerateRequest gen;
    rpc::RequestToProto(req, &gen);
    reader = impl_->api->Generate(&ctx, gen);
  }
  api::Summary sum;
  bool have_summary = false, cancelled = false;
  v1::GenerateResponse m;
  while (reader->Read(&m)) {
    if (m.has_summary()) {
      rpc::SummaryFromProto(m.summary(), &sum);
      have_summary = true;
      continue;
    }
    const api::Event ev = rpc::EventFromProto(m);
    sum.text += ev.text;
    sum.tokens.insert(sum.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    ++sum.chunks;
    if (!cancelled && ((on_event && !on_event(ev)) || (req.cancelled && req.cancelled()))) {
      cancelled = true;
      ctx.TryCancel();
    }
  }
  const grpc::Status st = reader->Finish();
  if (cancelled) return absl::CancelledError("cancelled by the caller");
  if (!st.ok()) return rpc::FromGrpc(st);
  if (!have_summary) return absl::DataLossError("the stream ended without a summary");
  return sum;
}

absl::StatusOr<std::vector<int32_t>> Client::Tokenize(const std::string& text, bool add_special, bool parse_special) {
  v1::TokenizeRequest req;
  req.set_text(text);
  req.set_add_special(add_special);
  req.set_parse_special(parse_special);
  v1::TokenizeResponse resp;
  grpc::ClientContext ctx;
  SetTimeout(&ctx, std::chrono::seconds(30));
  const grpc::Status st = impl_->api->Tokenize(&ctx, req, &resp);
  if (!st.ok()) return rpc::FromGrpc(st);
  return rpc::ToVector(resp.token_ids());
}

absl::StatusOr<Health> Client::GetHealth(std::chrono::milliseconds timeout, bool wait_for_ready) {
  v1::HealthResponse resp;
  grpc::ClientContext ctx;
  SetTimeout(&ctx, timeout);
  ctx.set_wait_for_ready(wait_for_ready);
  const grpc::Status st = impl_->api->Health(&ctx, v1::HealthRequest(), &resp);
  if (!st.ok()) return rpc::FromGrpc(st);
  Health h;
  h.serving = resp.serving();
  h.target_ready = resp.target_ready();
  h.draft_ready = resp.draft_ready();
  h.target_model = resp.target_model();
  h.draft_model = resp.draft_model();
  h.k = resp.k();
  h.speculation_enabled = resp.speculation_enabled();
  h.adaptive = resp.adaptive();
  h.draft_max = resp.draft_max();
  return h;
}

absl::Status Client::WaitServing(std::chrono::milliseconds timeout, bool need_draft) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  absl::Status last = absl::DeadlineExceededError("not serving yet");
  while (std::chrono::steady_clock::now() < end) {
    // Waiting for the channel (not failing fast) makes it reconnect as soon
    // as the coordinator listens.
    auto h = GetHealth(std::chrono::milliseconds(500), /*wait_for_ready=*/true);
    if (h.ok() && h->serving && (!need_draft || h->draft_ready)) return absl::OkStatus();
    if (!h.ok()) last = h.status();
    else last = absl::UnavailableError(need_draft && h->serving ? "the draft is not ready" : "the target is not ready");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return absl::DeadlineExceededError(absl::StrCat("coordinator not serving within ", timeout.count(), " ms: ",
                                                  last.message()));
}

absl::StatusOr<Stats> Client::GetStats(std::chrono::milliseconds timeout) {
  v1::StatsResponse r;
  grpc::ClientContext ctx;
  SetTimeout(&ctx, timeout);
  const grpc::Status st = impl_->admin->Stats(&ctx, v1::StatsRequest(), &r);
  if (!st.ok()) return rpc::FromGrpc(st);
  Stats s;
  s.requests_total = r.requests_total();
  s.requests_active = r.requests_active();
  s.requests_failed = r.requests_failed();
  s.completion_tokens = r.completion_tokens();
  s.steps = r.steps();
  s.proposed = r.proposed();
  s.accepted = r.accepted();
  s.draft_failures = r.draft_failures();
  s.pipelined_steps = r.pipelined_steps();
  s.pipeline_fallbacks = r.pipeline_fallbacks();
  s.acceptance_rate = r.acceptance_rate();
  s.mean_accepted_length = r.mean_accepted_length();
  s.tokens_per_second = r.tokens_per_second();
  s.uptime_seconds = r.uptime_seconds();
  s.k = r.k();
  s.speculation_enabled = r.speculation_enabled();
  s.draft_ready = r.draft_ready();
  s.target_ready = r.target_ready();
  s.draft_swaps = r.draft_swaps();
  s.draft_reconnects = r.draft_reconnects();
  s.target = FromInfo(r.target(), r.target().pid() != 0);
  s.draft = FromInfo(r.draft(), r.draft().pid() != 0);
  s.queue_depth = r.queue_depth();
  s.max_queue = r.max_queue();
  s.max_batch = r.max_batch();
  s.max_seq_len = r.max_seq_len();
  s.requests_running = r.requests_running();
  s.requests_rejected = r.requests_rejected();
  s.kv_blocks_reserved = r.kv_blocks_reserved();
  s.prompt_tokens = r.prompt_tokens();
  s.busy_seconds = r.busy_seconds();
  s.throughput_tokens_per_second = r.throughput_tokens_per_second();
  s.mean_queue_seconds = r.mean_queue_seconds();
  s.verify_batch_mean = r.verify_batch_mean();
  s.draft_batch_mean = r.draft_batch_mean();
  s.adaptive = r.adaptive();
  s.draft_max = r.draft_max();
  s.k_histogram.assign(r.k_histogram().begin(), r.k_histogram().end());
  s.step_costs = r.step_costs();
  s.lockstep = r.lockstep();
  s.acceptance_prior = r.acceptance_prior();
  s.step_time = rpc::StepTimeFromProto(r.step_time());
  s.step_time_speculative = rpc::StepTimeFromProto(r.step_time_speculative());
  s.speculative_steps = r.step_time_speculative().steps();
  for (const v1::RequestRecord& q : r.recent()) {
    RequestRecord rec;
    rec.id = q.id();
    rec.prompt_tokens = q.prompt_tokens();
    rec.completion_tokens = q.completion_tokens();
    rec.finish_reason = q.error().empty() ? FinishReasonName(rpc::FinishReasonFromProto(q.finish_reason())) : "error";
    rec.error = q.error();
    rec.acceptance_rate = q.acceptance_rate();
    rec.mean_accepted_length = q.mean_accepted_length();
    rec.tokens_per_second = q.tokens_per_second();
    rec.queue_seconds = q.queue_seconds();
    rec.open_seconds = q.open_seconds();
    rec.time_to_first_token_seconds = q.time_to_first_token_seconds();
    rec.elapsed_seconds = q.elapsed_seconds();
    rec.mean_k = q.mean_k();
    rec.adaptive = q.adaptive();
    s.recent.push_back(rec);
  }
  return s;
}

absl::StatusOr<WorkerStats> Client::SwapDraft(const std::string& path, std::chrono::milliseconds timeout) {
  v1::SwapDraftRequest req;
  req.set_path(path);
  v1::SwapDraftResponse resp;
  grpc::ClientContext ctx;
  SetTimeout(&ctx, timeout);
  const grpc::Status st = impl_->admin->SwapDraft(&ctx, req, &resp);
  if (!st.ok()) return rpc::FromGrpc(st);
  return FromInfo(resp.draft(), true);
}

absl::StatusOr<SpeculationSettings> Client::SetSpeculation(std::optional<int> k, std::optional<bool> enabled,
                                                           std::optional<bool> adaptive,
                                                           std::optional<int> draft_max) {
  v1::SetSpeculationRequest req;
  if (k) req.set_k(*k);
  if (enabled) req.set_enabled(*enabled);
  if (adaptive) req.set_adaptive(*adaptive);
  if (draft_max) req.set_draft_max(*draft_max);
  v1::SetSpeculationResponse resp;
  grpc::ClientContext ctx;
  SetTimeout(&ctx, std::chrono::seconds(10));
  const grpc::Status st = impl_->admin->SetSpeculation(&ctx, req, &resp);
  if (!st.ok()) return rpc::FromGrpc(st);
  return SpeculationSettings{resp.k(), resp.enabled(), resp.adaptive(), resp.draft_max()};
}

absl::StatusOr<std::pair<int, bool>> Client::SetSpeculation(std::optional<int> k, std::optional<bool> enabled) {
  auto s = SetSpeculation(k, enabled, std::nullopt, std::nullopt);
  if (!s.ok()) return s.status();
  return std::make_pair(s->k, s->enabled);
}

namespace {
std::string KHist(const std::vector<int64_t>& h) {
  int64_t total = 0;
  for (int64_t n : h) total += n;
  std::string out;
  for (size_t k = 0; k < h.size(); ++k) {
    if (h[k] == 0) continue;
    out += absl::StrFormat("%s%d:%.0f%%", out.empty() ? "" : " ", k, 100.0 * static_cast<double>(h[k]) / total);
  }
  return out.empty() ? "-" : out;
}
}  // namespace

std::string FormatStats(const Stats& s) {
  std::ostringstream os;
  os << absl::StrFormat("requests: %d total, %d running, %d queued (max %d), %d failed, %d rejected; uptime %.0f s\n",
                        s.requests_total, s.requests_running, s.queue_depth, s.max_queue, s.requests_failed,
                        s.requests_rejected, s.uptime_seconds);
  os << absl::StrFormat("admission: max-batch %d, max-seq-len %d, KV blocks reserved %d/%d; mean queue wait %.1f ms\n",
                        s.max_batch, s.max_seq_len, s.kv_blocks_reserved, s.target.kv_total_blocks,
                        1e3 * s.mean_queue_seconds);
  os << absl::StrFormat("tokens: %d prompt, %d generated in %d steps; %.1f tok/s per request, %.1f tok/s aggregate "
                        "(%.0f s busy)\n",
                        s.prompt_tokens, s.completion_tokens, s.steps, s.tokens_per_second,
                        s.throughput_tokens_per_second, s.busy_seconds);
  os << absl::StrFormat("speculation: %s, %s, draft %s; acceptance %.1f%% (%d/%d), mean accepted length %.2f\n",
                        s.speculation_enabled ? "on" : "off",
                        s.adaptive ? absl::StrFormat("adaptive k<=%d", s.draft_max) : absl::StrFormat("k=%d", s.k),
                        s.draft_ready ? "ready" : "not ready", 100.0 * s.acceptance_rate, s.accepted, s.proposed,
                        s.mean_accepted_length);
  os << "k histogram (drafts verified per step: share of steps): " << KHist(s.k_histogram) << "\n";
  if (!s.step_costs.empty()) os << "step costs: " << s.step_costs << "\n";
  if (!s.lockstep.empty()) os << "lockstep: " << s.lockstep << "\n";
  if (!s.acceptance_prior.empty()) os << "acceptance prior: " << s.acceptance_prior << "\n";
  if (s.steps > 0)
    os << StepTimeReport(s.step_time, s.steps, s.step_time_speculative, s.speculative_steps) << "\n";
  os << absl::StrFormat("batches: %.2f sequences per verify, %.2f per draft proposal\n", s.verify_batch_mean,
                        s.draft_batch_mean);
  os << absl::StrFormat("pipelined verify: %d of %d steps took the proposal from the exchange buffer (%d fell back)\n",
                        s.pipelined_steps, s.steps, s.pipeline_fallbacks);
  os << absl::StrFormat("draft: %d failures, %d reconnects, %d swaps\n", s.draft_failures, s.draft_reconnects,
                        s.draft_swaps);
  auto worker = [&](const char* name, const WorkerStats& w) {
    if (!w.reachable) {
      os << name << ": unreachable\n";
      return;
    }
    os << absl::StrFormat("%s: %s (%s, vocab %d) pid %d; sequences %d/%d, KV blocks %d/%d; %d forwards (%d cold), "
                          "%d batches (%d requests, mean %.2f, largest %d; %d lockstep cohorts, %d started short); "
                          "%d prefill + %d step tokens; %d prefill slices ran ahead of a waiting batch (%.1f ms)",
                          name, w.model_name, w.arch, w.vocab_size, w.pid, w.active_sequences, w.max_seqs,
                          w.kv_used_blocks, w.kv_total_blocks, w.forwards, w.cold_forwards, w.batches,
                          w.batched_requests, w.BatchMean(), w.max_batch, w.cohort_batches, w.cohort_timeouts,
                          w.prefill_tokens, w.forward_tokens - w.prefill_tokens, w.prefill_ahead_rounds,
                          w.prefill_ahead_seconds * 1e3);
    if (w.batched_requests > 0) {
      const double per = 1e3 / static_cast<double>(w.batched_requests);
      os << absl::StrFormat("; hand-off a call: gather %.3f ms, start %.3f ms, back %.3f ms",
                            w.handoff_gather_seconds * per, w.handoff_start_seconds * per,
                            w.handoff_back_seconds * per);
    }
    os << "\n";
    auto b = [](uint64_t v) { return Config::FormatBytes(static_cast<int64_t>(v)); };
    std::string shared, extra;
    if (w.memory_shared > 0)
      shared = absl::StrFormat(" (+ %s shared, mapped from pid %d)", b(w.memory_shared), w.memory_shared_from);
    if (w.memory_unplanned > 0) extra = absl::StrFormat(", beyond plan %s", b(w.memory_unplanned));
    os << absl::StrFormat("  memory: weights %s%s, KV %s, activations %s, exchange %s, runtime %s%s; total %s of %s",
                          b(w.memory_weights), shared, b(w.memory_kv), b(w.memory_activations), b(w.memory_exchange),
                          b(w.memory_runtime), extra, b(w.memory_total),
                          w.memory_budget < 0 ? std::string("unbounded") : Config::FormatBytes(w.memory_budget));
    if (w.memory_others > 0) os << absl::StrFormat(" (other engines on the device at start: %s)", b(w.memory_others));
    os << "\n";
    if (!w.weight_sharing.empty()) os << "  weights: " << w.weight_sharing << "\n";
  };
  worker("target", s.target);
  worker("draft", s.draft);
  if (!s.recent.empty()) {
    os << "recent requests (newest first):\n";
    os << absl::StrFormat("  %8s %6s %6s %-9s %7s %7s %6s %9s %9s %9s %9s\n", "id", "prompt", "tokens", "finish",
                          "accept", "acc.len", "mean k", "tok/s", "queue ms", "open ms", "ttft ms");
    for (const RequestRecord& r : s.recent) {
      os << absl::StrFormat("  %8d %6d %6d %-9s %6.1f%% %7.2f %6.2f %9.1f %9.1f %9.1f %9.1f%s\n", r.id,
                            r.prompt_tokens, r.completion_tokens, r.finish_reason, 100 * r.acceptance_rate,
                            r.mean_accepted_length, r.mean_k, r.tokens_per_second, 1e3 * r.queue_seconds,
                            1e3 * r.open_seconds, 1e3 * r.time_to_first_token_seconds,
                            r.error.empty() ? "" : "  " + r.error);
    }
  }
  return os.str();
}

}  // namespace specd::client
