#include "coordinator/frontend.h"

#include <random>

#include "absl/strings/str_cat.h"

#include "common/spec/warmup.h"
#include "common/util/log.h"
#include "proto/rpc/convert.h"
#include "proto/rpc/server.h"
#include "proto/rpc/status.h"

namespace specd {
namespace {

grpc::Status Invalid(const std::string& msg) { return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, msg); }

// The target's KV blocks that `positions` of one sequence take.
int64_t KvBlocks(const v1::InfoResponse& target, int64_t positions) {
  const int64_t block = std::max(target.kv_block_size(), 1);
  return (positions + block - 1) / block;
}

}  // namespace

Frontend::Frontend(Cluster* cluster, const FrontendOptions& opts)
    : cluster_(cluster),
      opts_(opts),
      limits_{opts.default_max_tokens, opts.max_tokens_limit},
      k_(opts.k),
      enabled_(opts.speculation),
      adaptive_(opts.adaptive),
      draft_max_(opts.draft_max),
      stats_(opts.recent_requests) {
  // A random start keeps ids apart from sequences a previous coordinator left.
  std::random_device rd;
  next_seq_ = static_cast<int32_t>(rd() & 0x3fffffff) + 1;
  if (!opts.acceptance_prior.empty()) status_ = prior_.Load(opts.acceptance_prior);
  if (status_.ok()) status_ = opts.ngram.Validate();
  api::SeedModelFreeCosts(&ngram_costs_);
  if (opts.lockstep) gate_ = std::make_unique<StepGate>(opts.lockstep_gate);
  if (opts.lockstep && opts.batch_calls) gather_ = std::make_unique<CallGatherers>(cluster_, opts.batch_calls_wait);
  AddCollectors();
  if (opts.warmup != WarmupMode::kOff) warm_thread_ = std::thread([this] { WarmUpLoop(); });
}

Frontend::~Frontend() {
  {
    std::lock_guard<std::mutex> l(warm_mu_);
    warm_stop_ = true;
  }
  warm_cv_.notify_all();  // (a warm-up under way sees warm_stop_ between steps)
  if (warm_thread_.joinable()) warm_thread_.join();
}

int32_t Frontend::NewSeq() {
  int32_t seq = next_seq_.fetch_add(1);
  if (seq <= 0 || seq > 0x7ffffff0) {
    next_seq_ = 2;
    seq = 1;
  }
  return seq;
}

// Runs for a target process not warmed yet (with the draft when it is
// usable), and for a usable draft whose epoch (a new process or a swap) was
// not warmed with this target: a draft that comes up after the target, or a
// swap, gets its own warm-up (with the target's verifies of its lengths); a
// draft that is down or being swapped costs none. A warm-up whose costs were
// dropped (requests ran beside it) runs again, up to kRemeasures times, at
// the next moment with no request running or queued, to measure them alone
// (its shapes are captured by then, so it runs no eager or capture pass).
void Frontend::WarmUpLoop() {
  constexpr int kRemeasures = 3;
  int64_t warmed_pid = 0;
  uint64_t warmed_epoch = 0;  // with warmed_pid's target; 0: none
  int remeasures_left = 0;    // re-runs left for the last warm-up, whose costs were dropped
  std::unique_lock<std::mutex> l(warm_mu_);
  while (!warm_cv_.wait_for(l, std::chrono::milliseconds(200), [this] { return warm_stop_.load(); })) {
    const std::shared_ptr<const TargetView> view = cluster_->target();
    if (!view) continue;
    const std::optional<DraftView> dv = cluster_->draft();
    const std::optional<v1::InfoResponse> di = cluster_->draft_info();
    const bool warmed = view->info.pid() == warmed_pid && (!dv || dv->epoch == warmed_epoch);
    const bool idle = admission_.running() == 0 && admission_.queued() == 0;
    if (warmed && !(remeasures_left > 0 && idle)) continue;
    const bool rerun = warmed;
    remeasures_left = rerun ? remeasures_left - 1 : 0;
    if (view->info.pid() != warmed_pid) warmed_epoch = 0;
    warmed_pid = view->info.pid();
    if (dv) warmed_epoch = dv->epoch;
    if (!WarmsUp(opts_.warmup, view->info.prepares_shapes() || (dv && di && di->prepares_shapes()))) continue;
    l.unlock();
    WarmupOptions w;
    w.seq = NewSeq();
    if (dv) w.k_max = std::min(draft_max_.load(), dv->k_max);
    w.max_context = ContextFor(view->info);
    w.prompt_tokens = static_cast<int>(std::max(view->info.prefill_chunk(), di ? di->prefill_chunk() : 0));
    w.pipeline_verify = opts_.pipeline_verify;
    // Measured into a table of its own, kept only if no request ran beside it:
    // a draft that connects after the target is warmed while requests run,
    // and both sides' forwards then share the device (round 40: its 1-sequence
    // draft cells at 2-3x and a 35-token verify at 39.7 ms against ~24 made
    // six streams' adaptive k fall to 1, 0.71x the best fixed k).
    SpecCosts own;
    w.costs = &own;
    w.deadline = std::chrono::system_clock::now() + std::chrono::minutes(2);
    w.cancelled = [this] { return warm_stop_.load(); };
    // Admitted as a request is, so that it never takes a sequence slot or KV blocks a request was promised.
    auto slot = admission_.Acquire(KvBlocks(view->info, WarmupPositions(w)), LimitsFor(view->info), w.deadline,
                                   w.cancelled);
    if (!slot.ok()) {
      SPECD_LOG(WARN) << "warm-up skipped" << Kv("why", slot.status().ToString());
      l.lock();
      continue;
    }
    GrpcTargetClient target(cluster_, opts_.timeouts, gather_.get());
    GrpcDraftClient draft(cluster_, opts_.timeouts, gather_.get());
    const int64_t admitted = admission_.admitted();  // the warm-up's own slot included
    const bool alone_at_start = admission_.running() == 1;
    WarmupReport rep;
    {
      // Requests' steps meanwhile share the device with the warm-up's: not
      // what their lengths cost either (counted as beside a prefill: cold).
      SpecCosts::Prefill beside(&costs_);
      rep = WarmUp(*view->tokenizer, target, dv ? &draft : nullptr, w);
    }
    const bool alone = alone_at_start && admission_.admitted() == admitted && admission_.running() == 1;
    if (rep.status.ok() && alone) costs_.Absorb(own);
    if (alone || !rep.status.ok()) {
      remeasures_left = 0;
    } else if (!rerun) {
      remeasures_left = kRemeasures;
    }
    if (rep.status.ok()) {
      SPECD_LOG(INFO) << "warm-up: every step shape run" << Kv("target_pid", view->info.pid())
                      << Kv("draft", dv ? "yes" : "no") << Kv("ran", rep.ToString())
                      << Kv("costs", alone                ? "kept"
                                     : remeasures_left > 0 ? "dropped (requests ran beside it; again when idle)"
                                                           : "dropped (requests ran beside it)");
    } else {
      // Requests pay the shapes' first runs themselves; nothing else is lost.
      SPECD_LOG(WARN) << "warm-up failed" << Kv("ran", rep.ToString()) << Kv("why", rep.status.ToString());
    }
    l.lock();
  }
}

std::string Frontend::LockstepFigures() const {
  if (!gate_) return "off";
  std::string out = gate_->Figures().ToString();
  if (gather_) {
    absl::StrAppend(&out, "; messages: target ", gather_->verify.Figures().ToString(), ", draft ",
                    gather_->propose.Figures().ToString());
  }
  return out;
}

int Frontend::ContextFor(const v1::InfoResponse& target) const {
  const int t = target.max_seq_len();
  return opts_.max_seq_len > 0 ? std::min(opts_.max_seq_len, t) : t;
}

Admission::Limits Frontend::LimitsFor(const v1::InfoResponse& target) const {
  Admission::Limits l;
  const int slots = std::max(target.max_seqs(), 1);
  l.max_running = opts_.max_batch > 0 ? std::min(opts_.max_batch, slots) : slots;
  l.kv_blocks = target.kv_total_blocks();
  l.max_queue = opts_.max_queue;
  return l;
}

absl::StatusOr<api::Summary> Frontend::Generate(const api::Request& req, const api::EventFn& on_event) {
  const auto arrival = std::chrono::steady_clock::now();
  struct Active {
    std::atomic<int64_t>& n;
    explicit Active(std::atomic<int64_t>& a) : n(a) { ++n; }
    ~Active() { --n; }
  } active(active_);
  const Deadline deadline = req.deadline;
  auto cancelled = [&req] { return req.cancelled && req.cancelled(); };
  auto invalid = [&](const absl::Status& st) {
    stats_.Rejected("invalid");
    return st;
  };

  // ---- checks that need no worker
  const absl::StatusOr<int> max_tokens = api::Check(req, limits_);
  if (!max_tokens.ok()) return invalid(max_tokens.status());
  const api::SpecChoice choice = api::ChooseSpeculation(req, SpecNow());

  std::vector<int32_t> prompt;
  SpecResult r;
  bool wrote = false;
  double queue_seconds = 0, ttft = 0;
  int64_t id = 0;
  for (int attempt = 0;; ++attempt) {
    // ---- the target (new requests wait for it, up to their deadline)
    std::shared_ptr<const TargetView> view = WaitTarget(deadline, cancelled);
    if (!view) return TargetUnavailable(deadline, cancelled);
    const Tokenizer& tok = *view->tokenizer;
    const int context = ContextFor(view->info);
    if (attempt == 0) {
      auto p = api::EncodePrompt(req, tok, context);
      if (!p.ok()) return invalid(p.status());
      prompt = *std::move(p);
    }
    // max_tokens is clamped to the room the context leaves.
    const int room = context - static_cast<int>(prompt.size());
    const int run_tokens = std::min(*max_tokens, room);
    const int64_t blocks = KvBlocks(view->info, static_cast<int64_t>(prompt.size()) + run_tokens);
    const Admission::Limits limits = LimitsFor(view->info);
    if (limits.kv_blocks > 0 && blocks > limits.kv_blocks)
      return invalid(absl::InvalidArgumentError(absl::StrCat("prompt + max_tokens need ", blocks,
                                                             " KV blocks; the target's pool has ", limits.kv_blocks)));

    auto slot = admission_.Acquire(blocks, limits, deadline, cancelled);
    if (!slot.ok()) {
      if (slot.status().code() == absl::StatusCode::kResourceExhausted) stats_.Rejected("queue_full");
      return slot.status();
    }
    queue_seconds += slot->queue_seconds();

    SpecRequest sr = api::ToSpecRequest(req, prompt, run_tokens, choice, context);
    sr.seq = NewSeq();
    id = next_id_.fetch_add(1);
    if (choice.follow_live) sr.live_k = [this] { return LiveK(); };
    GrpcTargetClient target(cluster_, opts_.timeouts, gather_.get());
    GrpcDraftClient draft(cluster_, opts_.timeouts, gather_.get());
    // Without a draft worker, n-gram proposals still work.
    api::RequestProposer proposer(choice.proposer, opts_.ngram, cluster_->has_draft() ? &draft : nullptr);
    sr.costs = proposer.ngram_only() ? &ngram_costs_ : &costs_;
    sr.prior = proposer.ngram_only() ? &ngram_prior_ : &prior_;
    sr.cancelled = cancelled;
    sr.draft_retry = opts_.draft_retry;
    sr.gate = gate_.get();
    sr.pipeline_verify = opts_.pipeline_verify;
    auto on_step = [&](const StepEvent& ev) {
      if (!ev.tokens.empty() && ttft == 0)
        ttft = std::chrono::duration<double>(std::chrono::steady_clock::now() - arrival).count();
      wrote = true;
      return on_event ? on_event(api::ToEvent(ev)) : true;
    };
    r = RunSpeculative(sr, tok, target, proposer.get(), on_step);
    // The target went away before anything was streamed: wait for it again.
    if (r.reason == FinishReason::kError && r.status.code() == absl::StatusCode::kUnavailable && !wrote &&
        attempt < 20 && std::chrono::system_clock::now() < deadline && !cancelled()) {
      SPECD_LOG(INFO) << "target unavailable before the first step; waiting for it" << Kv("id", id);
      continue;
    }
    break;
  }

  stats_.Record(RequestOutcome{id, static_cast<int>(prompt.size()), &r, queue_seconds, ttft, choice.adaptive});
  switch (r.reason) {
    case FinishReason::kCancelled:
      return absl::CancelledError("cancelled by the client");
    case FinishReason::kError:
      return r.status;
    default:
      break;
  }
  api::Summary s = api::ToSummary(r, static_cast<int>(prompt.size()), choice.adaptive);
  s.queue_seconds = queue_seconds;
  s.time_to_first_token_seconds = ttft;
  return s;
}

std::shared_ptr<const TargetView> Frontend::WaitTarget(Deadline deadline, const std::function<bool()>& cancelled) {
  const Deadline wait_until = std::min(deadline, std::chrono::system_clock::now() + opts_.target_wait);
  return cluster_->WaitTarget(wait_until, cancelled);
}

absl::Status Frontend::TargetUnavailable(Deadline deadline, const std::function<bool()>& cancelled) const {
  if (cancelled()) return absl::CancelledError("cancelled by the client");
  if (std::chrono::system_clock::now() >= deadline)
    return absl::DeadlineExceededError("the target worker did not come up before the deadline");
  return absl::UnavailableError(absl::StrCat("the target worker at ", cluster_->options().target_address,
                                             " is not available (waited ", opts_.target_wait.count() / 1000.0, " s)"));
}

api::SpecDefaults Frontend::SpecNow() const {
  return api::SpecDefaults{k_.load(),          enabled_.load(),      adaptive_.load(), draft_max_.load(),
                           opts_.min_confidence, opts_.proposer, opts_.ngram};
}

absl::StatusOr<std::vector<int32_t>> Frontend::Tokenize(const std::string& text, bool add_special, bool parse_special) {
  std::shared_ptr<const TargetView> view = WaitTarget(kNoDeadline, [] { return false; });
  if (!view) return absl::UnavailableError("the target worker (and its tokenizer) is not available");
  return view->tokenizer->Encode(text, add_special, parse_special);
}

std::string Frontend::TokenText(int32_t id) const {
  std::shared_ptr<const TargetView> t = cluster_->target();
  return t ? t->tokenizer->TokenBytes(id, /*special=*/true) : "";
}

std::string Frontend::ModelName() const {
  std::shared_ptr<const TargetView> t = cluster_->target();
  return t ? t->info.model_name() : "";
}

grpc::Status Frontend::Tokenize(grpc::ServerContext* ctx, const v1::TokenizeRequest& req, v1::TokenizeResponse* resp) {
  std::shared_ptr<const TargetView> view = WaitTarget(rpc::CallDeadline(*ctx), [ctx] { return ctx->IsCancelled(); });
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
  resp->set_adaptive(adaptive_.load());
  resp->set_draft_max(draft_max_.load());
  return grpc::Status::OK;
}

namespace {
double BatchMean(const v1::InfoResponse& i) {
  return i.batches() > 0 ? static_cast<double>(i.batched_requests()) / static_cast<double>(i.batches()) : 0.0;
}
}  // namespace

grpc::Status Frontend::Stats(v1::StatsResponse* resp) {
  stats_.Fill(resp);
  resp->set_requests_active(active_.load());
  resp->set_requests_running(admission_.running());
  resp->set_queue_depth(admission_.queued());
  resp->set_requests_rejected(admission_.rejected());
  resp->set_kv_blocks_reserved(admission_.reserved_blocks());
  resp->set_max_queue(opts_.max_queue);
  const double busy = admission_.busy_seconds();
  resp->set_busy_seconds(busy);
  resp->set_throughput_tokens_per_second(busy > 0 ? static_cast<double>(resp->completion_tokens()) / busy : 0.0);
  resp->set_k(k_.load());
  resp->set_speculation_enabled(enabled_.load());
  resp->set_adaptive(adaptive_.load());
  resp->set_draft_max(draft_max_.load());
  resp->set_step_costs(costs_.ToString());
  resp->set_lockstep(LockstepFigures());
  resp->set_acceptance_prior(prior_.ToString());
  resp->set_draft_ready(cluster_->draft().has_value());
  std::shared_ptr<const TargetView> t = cluster_->target();
  resp->set_target_ready(t != nullptr);
  if (t) {
    resp->set_max_batch(LimitsFor(t->info).max_running);
    resp->set_max_seq_len(ContextFor(t->info));
  }
  resp->set_draft_swaps(cluster_->draft_swaps());
  resp->set_draft_reconnects(cluster_->draft_reconnects());
  resp->set_uptime_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  // Live figures (KV use, batches) straight from the workers.
  auto info = [&](auto* stub, v1::InfoResponse* out) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + cluster_->options().probe_timeout);
    (void)stub->Info(&ctx, v1::InfoRequest(), out);
  };
  info(&cluster_->target_stub(), resp->mutable_target());
  if (cluster_->draft_stub()) info(cluster_->draft_stub(), resp->mutable_draft());
  resp->set_verify_batch_mean(BatchMean(resp->target()));
  resp->set_draft_batch_mean(BatchMean(resp->draft()));
  return grpc::Status::OK;
}

void Frontend::AddCollectors() {
  using metrics::Sink;
  using metrics::Type;
  stats_.registry().AddCollector([this](Sink& s) {
    s.Add("specd_requests_active", "Requests in the coordinator (queued or running).", Type::kGauge, {},
          static_cast<double>(active_.load()));
    s.Add("specd_requests_running", "Requests admitted and generating.", Type::kGauge, {}, admission_.running());
    s.Add("specd_queue_depth", "Requests waiting for admission.", Type::kGauge, {}, admission_.queued());
    s.Add("specd_kv_blocks_reserved", "Target KV blocks reserved by running requests.", Type::kGauge, {},
          static_cast<double>(admission_.reserved_blocks()));
    s.Add("specd_busy_seconds_total", "Time with at least one request running.", Type::kCounter, {},
          admission_.busy_seconds());
    s.Add("specd_uptime_seconds", "Seconds since the coordinator started.", Type::kGauge, {},
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
    s.Add("specd_speculation_enabled", "Whether requests use the draft.", Type::kGauge, {}, enabled_.load());
    s.Add("specd_speculation_adaptive", "Whether the speculation length is chosen per step.", Type::kGauge, {},
          adaptive_.load());
    s.Add("specd_speculation_k", "Fixed-mode drafts per step.", Type::kGauge, {}, k_.load());
    s.Add("specd_speculation_draft_max", "Adaptive mode's most drafts per step.", Type::kGauge, {},
          draft_max_.load());
    s.Add("specd_draft_ready", "Whether the draft is usable now.", Type::kGauge, {}, cluster_->draft().has_value());
    std::shared_ptr<const TargetView> t = cluster_->target();
    s.Add("specd_target_ready", "Whether the target is connected.", Type::kGauge, {}, t != nullptr);
    s.Add("specd_draft_swaps_total", "Draft model swaps.", Type::kCounter, {},
          static_cast<double>(cluster_->draft_swaps()));
    if (gate_) {
      // The lockstep gate's two barriers (common/spec/step_gate.h).
      const StepGateFigures g = gate_->Figures();
      for (const auto& [name, f] : {std::pair<const char*, const GateFigures&>{"start", g.start}, {"verify", g.verify}}) {
        const metrics::Labels l = {{"barrier", name}};
        s.Add("specd_lockstep_openings_total", "Lockstep openings that released several requests together.",
              Type::kCounter, l, static_cast<double>(f.opened));
        s.Add("specd_lockstep_released_total", "Requests those openings released (per opening: the batch).",
              Type::kCounter, l, static_cast<double>(f.members_released));
        s.Add("specd_lockstep_timeouts_total", "Openings forced by the timeout (a lagging request).", Type::kCounter,
              l, static_cast<double>(f.timed_out));
        s.Add("specd_lockstep_wait_seconds_total", "Time requests waited at the barrier.", Type::kCounter, l,
              f.waited_seconds);
      }
    }
    if (gather_) {
      // Lockstep calls sent to each worker in one message (coordinator/call_gatherer.h).
      for (const auto& [role, f] : {std::pair<const char*, GatherFigures>{"target", gather_->verify.Figures()},
                                    {"draft", gather_->propose.Figures()}}) {
        const metrics::Labels l = {{"role", role}};
        s.Add("specd_batch_messages_total", "Batch messages that carried lockstep calls to a worker.",
              Type::kCounter, l, static_cast<double>(f.messages));
        s.Add("specd_batch_message_calls_total", "Calls those messages carried.", Type::kCounter, l,
              static_cast<double>(f.calls));
        s.Add("specd_batch_messages_short_total", "Messages sent before all of their cohort's calls came.",
              Type::kCounter, l, static_cast<double>(f.short_sends));
      }
    }
    // The workers as last probed (no RPC on a scrape).
    auto worker = [&](const char* role, const v1::InfoResponse& i) {
      const metrics::Labels r = {{"role", role}};
      auto with = [&](const char* k, const char* v) {
        metrics::Labels l = r;
        l.push_back({k, v});
        return l;
      };
      const v1::MemoryLedger& m = i.ledger();
      s.Add("specd_worker_memory_bytes", "Worker memory plan by part.", Type::kGauge, with("part", "weights"),
            static_cast<double>(m.weights()));
      s.Add("specd_worker_memory_bytes", "", Type::kGauge, with("part", "kv_pool"), static_cast<double>(m.kv_pool()));
      s.Add("specd_worker_memory_bytes", "", Type::kGauge, with("part", "activations"),
            static_cast<double>(m.activations()));
      s.Add("specd_worker_memory_bytes", "", Type::kGauge, with("part", "exchange"), static_cast<double>(m.exchange()));
      s.Add("specd_worker_memory_bytes", "", Type::kGauge, with("part", "runtime"), static_cast<double>(m.runtime()));
      // Mapped from another process: held (and counted in total) there.
      s.Add("specd_worker_memory_bytes", "", Type::kGauge, with("part", "shared"), static_cast<double>(m.shared()));
      s.Add("specd_worker_memory_bytes", "", Type::kGauge, with("part", "total"), static_cast<double>(m.total()));
      s.Add("specd_worker_memory_budget_bytes", "Worker memory budget (-1: unbounded).", Type::kGauge, r,
            static_cast<double>(m.budget()));
      s.Add("specd_worker_kv_blocks", "Worker KV pool blocks.", Type::kGauge, with("state", "used"),
            i.kv_used_blocks());
      s.Add("specd_worker_kv_blocks", "", Type::kGauge, with("state", "total"), i.kv_total_blocks());
      s.Add("specd_worker_sequences", "Sequences open on the worker.", Type::kGauge, r, i.active_sequences());
      s.Add("specd_worker_batches_total", "Batched Propose/Verify rounds.", Type::kCounter, r,
            static_cast<double>(i.batches()));
      s.Add("specd_worker_batched_sequences_total", "Sequences those batches carried.", Type::kCounter, r,
            static_cast<double>(i.batched_requests()));
      s.Add("specd_worker_cohort_batches_total", "Batches that gathered a lockstep cohort's calls.", Type::kCounter,
            r, static_cast<double>(i.cohort_batches()));
      s.Add("specd_worker_cohort_timeouts_total",
            "Of those, batches that started before the whole cohort came (--cohort-wait-us).", Type::kCounter, r,
            static_cast<double>(i.cohort_timeouts()));
      s.Add("specd_worker_prefill_ahead_seconds_total",
            "Seconds of prefill slices that ran while a gathered batch of calls waited for them.", Type::kCounter, r,
            i.prefill_ahead_seconds());
      s.Add("specd_worker_handoff_seconds_total",
            "The batched calls' hand-off, summed over specd_worker_batched_sequences_total: gather (for the batch's "
            "last call), start (from it to the batch's start), back (from the result to the handler).",
            Type::kCounter, with("phase", "gather"), i.handoff_gather_seconds());
      s.Add("specd_worker_handoff_seconds_total", "", Type::kCounter, with("phase", "start"),
            i.handoff_start_seconds());
      s.Add("specd_worker_handoff_seconds_total", "", Type::kCounter, with("phase", "back"), i.handoff_back_seconds());
      s.Add("specd_worker_cold_forwards_total",
            "Forward batches run cold (CUDA: a batch shape's first eager run or its graph capture).", Type::kCounter,
            r, static_cast<double>(i.cold_forwards()));
      s.Add("specd_worker_forwards_total", "Forward passes.", Type::kCounter, r, static_cast<double>(i.forwards()));
      s.Add("specd_worker_forward_tokens_total", "Tokens through forward passes (prefill + steps).", Type::kCounter,
            r, static_cast<double>(i.forward_tokens()));
      s.Add("specd_worker_prefill_tokens_total", "Prompt tokens prefilled in chunks.", Type::kCounter, r,
            static_cast<double>(i.prefill_tokens()));
      s.Add("specd_worker_forward_seconds_total", "Time in forward passes.", Type::kCounter, r, i.forward_seconds());
    };
    if (t) worker("target", t->info);
    if (const std::optional<v1::InfoResponse> d = cluster_->draft_info()) worker("draft", *d);
  });
}

grpc::Status Frontend::SwapDraft(const v1::SwapDraftRequest& req, v1::SwapDraftResponse* resp) {
  auto info = cluster_->SwapDraft(req.path());
  if (!info.ok()) return rpc::ToGrpc(info.status());
  // The new draft has its own speed and its own agreement with the target.
  costs_.ForgetDraft();
  prior_.Reset();
  *resp->mutable_draft() = *info;
  return grpc::Status::OK;
}

grpc::Status Frontend::SetSpeculation(const v1::SetSpeculationRequest& req, v1::SetSpeculationResponse* resp) {
  if (req.has_k() && (req.k() < 1 || req.k() > api::kMaxK))
    return Invalid(absl::StrCat("k ", req.k(), " out of range [1, ", api::kMaxK,
                                "] (use enabled=false to turn speculation off)"));
  if (req.has_draft_max() && (req.draft_max() < 1 || req.draft_max() > api::kMaxK))
    return Invalid(absl::StrCat("draft_max ", req.draft_max(), " out of range [1, ", api::kMaxK, "]"));
  if (req.has_k()) k_ = req.k();
  if (req.has_draft_max()) draft_max_ = req.draft_max();
  // Setting k alone asks for that k: fixed mode.
  if (req.has_adaptive()) adaptive_ = req.adaptive();
  else if (req.has_k()) adaptive_ = false;
  if (req.has_enabled()) enabled_ = req.enabled();
  SPECD_LOG(INFO) << "speculation settings" << Kv("k", k_.load()) << Kv("enabled", enabled_.load())
                  << Kv("adaptive", adaptive_.load()) << Kv("draft_max", draft_max_.load());
  resp->set_k(k_.load());
  resp->set_enabled(enabled_.load());
  resp->set_adaptive(adaptive_.load());
  resp->set_draft_max(draft_max_.load());
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Serve(grpc::ServerContext* ctx, const v1::GenerateRequest& req,
                                       const v1::ChatRequest* chat, grpc::ServerWriter<v1::GenerateResponse>* writer) {
  if (auto st = rpc::Authorize(ctx); !st.ok()) return st;
  auto r = rpc::RequestFromProto(req, chat);
  if (!r.ok()) return rpc::ToGrpc(r.status());
  // The loop ends a little before the call's deadline, so that the client
  // still receives the final message (finish reason "deadline").
  r->deadline = rpc::StreamDeadline(rpc::CallDeadline(*ctx));
  r->cancelled = [ctx] { return ctx->IsCancelled(); };
  auto sum = f_->Generate(*r, [&](const api::Event& ev) {
    v1::GenerateResponse m;
    rpc::EventToProto(ev, &m);
    return writer->Write(m);
  });
  if (!sum.ok()) return rpc::ToGrpc(sum.status());
  v1::GenerateResponse last;
  rpc::SummaryToProto(*sum, last.mutable_summary());
  writer->Write(last);
  return grpc::Status::OK;
}

}  // namespace specd
