#include "coordinator/cluster.h"

#include "common/util/config.h"
#include "common/util/log.h"
#include "proto/rpc/status.h"

namespace specd {
namespace {

absl::StatusOr<std::shared_ptr<grpc::Channel>> WorkerChannel(const std::string& address,
                                                             const rpc::ClientSecurity& sec) {
  grpc::ChannelArguments args;
  // Workers come back after a crash or restart: notice within a second
  // instead of gRPC's default back-off of up to two minutes.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetMaxReceiveMessageSize(64 << 20);
  return rpc::MakeChannel(address, sec, args);
}

bool MeansDown(absl::StatusCode c) {
  return c == absl::StatusCode::kUnavailable || c == absl::StatusCode::kDeadlineExceeded ||
         c == absl::StatusCode::kUnknown || c == absl::StatusCode::kInternal;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Cluster>> Cluster::Create(ClusterOptions opts) {
  std::unique_ptr<Cluster> c(new Cluster(std::move(opts)));
  SPECD_ASSIGN_OR_RETURN(auto target, WorkerChannel(c->opts_.target_address, c->opts_.security));
  c->target_stub_ = v1::TargetWorker::NewStub(target);
  if (!c->opts_.draft_address.empty()) {
    SPECD_ASSIGN_OR_RETURN(auto draft, WorkerChannel(c->opts_.draft_address, c->opts_.security));
    c->draft_stub_ = v1::DraftWorker::NewStub(draft);
  }
  return c;
}

Cluster::~Cluster() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  wake_cv_.notify_all();
  target_cv_.notify_all();
  for (std::thread& t : monitors_) t.join();
}

void Cluster::Start() {
  // One prober per worker, so that a worker that does not answer never
  // delays noticing the other.
  monitors_.emplace_back([this] { Monitor(&Cluster::ProbeTarget); });
  if (draft_stub_) monitors_.emplace_back([this] { Monitor(&Cluster::ProbeDraft); });
}

void Cluster::Wake() {
  {
    std::lock_guard<std::mutex> l(mu_);
    ++wake_;
  }
  wake_cv_.notify_all();
}

void Cluster::Monitor(void (Cluster::*probe)()) {
  uint64_t seen = 0;
  while (true) {
    (this->*probe)();
    AttachIfNeeded();
    std::unique_lock<std::mutex> l(mu_);
    wake_cv_.wait_for(l, opts_.probe_interval, [&] { return wake_ != seen || stop_; });
    if (stop_) return;
    seen = wake_;
  }
}

namespace {
// Probes wait for the channel to connect (a restarted worker is found as soon
// as it listens) but no longer than the probe timeout.
void ProbeContext(grpc::ClientContext* ctx, std::chrono::milliseconds timeout) {
  ctx->set_wait_for_ready(true);
  ctx->set_deadline(std::chrono::system_clock::now() + timeout);
}
}  // namespace

void Cluster::ProbeTarget() {
  grpc::ClientContext ctx;
  ProbeContext(&ctx, opts_.probe_timeout);
  v1::InfoResponse info;
  const grpc::Status gs = target_stub_->Info(&ctx, v1::InfoRequest(), &info);
  std::shared_ptr<const TargetView> cur = target();
  if (!gs.ok()) {
    std::lock_guard<std::mutex> l(mu_);
    if (target_) {
      SPECD_LOG(WARN) << "target worker down" << Kv("address", opts_.target_address) << Kv("error", gs.error_message());
      target_.reset();
    }
    return;
  }
  auto view = std::make_shared<TargetView>();
  view->info = info;
  // Same vocabulary as the tokenizer we hold: keep it (a restart of the same model).
  if (tok_cache_ && tok_cache_->info.vocab_digest() == info.vocab_digest()) {
    view->file = tok_cache_->file;
    view->tokenizer = tok_cache_->tokenizer;
  } else {
    const std::string path = opts_.tokenizer_model.empty() ? info.model_path() : opts_.tokenizer_model;
    auto file = GgufFile::Open(path);
    absl::StatusOr<std::unique_ptr<Tokenizer>> tok =
        file.ok() ? Tokenizer::FromGguf(**file) : absl::StatusOr<std::unique_ptr<Tokenizer>>(file.status());
    std::string err;
    if (!tok.ok()) {
      err = absl::StrCat("cannot load the target's tokenizer from ", path, ": ", tok.status().ToString());
    } else if ((*tok)->VocabDigest() != info.vocab_digest()) {
      err = absl::StrCat(path, " does not have the target's vocabulary (set --tokenizer-model)");
    }
    if (!err.empty()) {
      if (err != tok_error_) SPECD_LOG(ERROR) << "not serving: " << err;  // once, not every probe
      tok_error_ = err;
      return;
    }
    tok_error_.clear();
    view->file = std::shared_ptr<const GgufFile>(std::move(*file));
    view->tokenizer = std::shared_ptr<const Tokenizer>(std::move(*tok));
    tok_cache_ = view;
  }
  std::lock_guard<std::mutex> l(mu_);
  if (!cur || cur->info.pid() != info.pid()) {
    SPECD_LOG(INFO) << "target worker connected" << Kv("address", opts_.target_address) << Kv("pid", info.pid())
                    << Kv("model", info.model_name()) << Kv("vocab", info.vocab_size())
                    << Kv("memory", Config::FormatBytes(static_cast<int64_t>(info.ledger().total())))
                    << Kv("budget", info.ledger().budget() < 0 ? std::string("unbounded")
                                                               : Config::FormatBytes(info.ledger().budget()))
                    << Kv("weights", info.weight_sharing());
    // A draft mapping the previous target's weights unloads itself when that
    // process exits and maps this one's once it is ready (its exporter watch).
    if (draft_info_ && draft_info_->ledger().shared_from_pid() != 0 &&
        draft_info_->ledger().shared_from_pid() != info.pid())
      SPECD_LOG(INFO) << "the draft maps weights from an earlier target process; it re-maps them from this one"
                      << Kv("draft_pid", draft_info_->pid()) << Kv("mapped_from", draft_info_->ledger().shared_from_pid());
  }
  target_ = std::move(view);
  target_cv_.notify_all();
}

void Cluster::ProbeDraft() {
  if (!draft_stub_) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (paused_) return;
  }
  grpc::ClientContext ctx;
  ProbeContext(&ctx, opts_.probe_timeout);
  v1::InfoResponse info;
  const grpc::Status gs = draft_stub_->Info(&ctx, v1::InfoRequest(), &info);
  std::lock_guard<std::mutex> l(mu_);
  if (paused_) return;  // a swap started meanwhile: it decides the draft's state
  if (!gs.ok()) {
    if (draft_info_) {
      SPECD_LOG(WARN) << "draft worker unavailable; requests continue target-only"
                      << Kv("address", opts_.draft_address) << Kv("error", gs.error_message());
      draft_info_.reset();
    }
    return;
  }
  if (info.pid() != last_draft_pid_ || info.exchange().name() != last_exchange_) {
    // Its sequences are gone (a new process or model): requests reopen theirs.
    if (last_draft_pid_ != 0) ++reconnects_;
    ++epoch_;
    last_draft_pid_ = info.pid();
    last_exchange_ = info.exchange().name();
    vocab_warned_ = false;
    SPECD_LOG(INFO) << "draft worker connected" << Kv("address", opts_.draft_address) << Kv("pid", info.pid())
                    << Kv("model", info.model_name()) << Kv("exchange", info.exchange().name())
                    << Kv("memory", Config::FormatBytes(static_cast<int64_t>(info.ledger().total())))
                    << Kv("weights", info.weight_sharing());
  } else if (!draft_info_) {
    SPECD_LOG(INFO) << "draft worker reachable again" << Kv("pid", info.pid());
  }
  if (target_ && info.vocab_digest() != target_->info.vocab_digest() && !vocab_warned_) {
    vocab_warned_ = true;
    SPECD_LOG(ERROR) << "draft vocabulary differs from the target's; not using it" << Kv("draft", info.model_path())
                     << Kv("target", target_->info.model_path());
  }
  draft_info_ = std::move(info);
}

void Cluster::AttachIfNeeded() {
  std::lock_guard<std::mutex> attach_lock(attach_mu_);  // both probers call this
  v1::AttachDraftRequest req;
  int64_t tpid = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!target_ || !draft_info_ || paused_ || draft_info_->vocab_digest() != target_->info.vocab_digest()) return;
    if (attached_name_ == draft_info_->exchange().name() && attached_target_pid_ == target_->info.pid()) return;
    *req.mutable_exchange() = draft_info_->exchange();
    tpid = target_->info.pid();
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + opts_.probe_timeout);
  v1::AttachDraftResponse resp;
  const grpc::Status gs = target_stub_->AttachDraft(&ctx, req, &resp);
  std::lock_guard<std::mutex> l(mu_);
  if (!gs.ok()) {
    SPECD_LOG(WARN) << "target refused the draft's exchange buffer" << Kv("exchange", req.exchange().name())
                    << Kv("error", gs.error_message());
    return;
  }
  attached_name_ = req.exchange().name();
  attached_target_pid_ = tpid;
  attached_pipelines_ = resp.pipelined_verify();
  SPECD_LOG(INFO) << "target attached the draft's exchange buffer; speculation on"
                  << Kv("exchange", attached_name_) << Kv("target_pid", tpid);
}

std::shared_ptr<const TargetView> Cluster::target() const {
  std::lock_guard<std::mutex> l(mu_);
  return target_;
}

std::shared_ptr<const TargetView> Cluster::WaitTarget(Deadline deadline, const std::function<bool()>& cancelled) {
  std::unique_lock<std::mutex> l(mu_);
  while (!target_ && !stop_) {
    if ((cancelled && cancelled()) || std::chrono::system_clock::now() >= deadline) return nullptr;
    // Wake up now and then to poll `cancelled`.
    const Deadline next = std::min(deadline, std::chrono::system_clock::now() + std::chrono::milliseconds(100));
    target_cv_.wait_until(l, next);
  }
  return target_;
}

bool Cluster::DraftUsableLocked() const {
  return target_ && draft_info_ && !paused_ && draft_info_->vocab_digest() == target_->info.vocab_digest() &&
         attached_name_ == draft_info_->exchange().name() && attached_target_pid_ == target_->info.pid();
}

bool Cluster::target_batches() const {
  const std::shared_ptr<const TargetView> t = target();
  return t && t->info.batch_calls();
}

bool Cluster::target_pipelines() const {
  std::lock_guard<std::mutex> l(mu_);
  return DraftUsableLocked() && attached_pipelines_;
}

std::optional<DraftView> Cluster::draft() const {
  std::lock_guard<std::mutex> l(mu_);
  if (!DraftUsableLocked()) return std::nullopt;
  return DraftView{epoch_, draft_info_->k_max(), draft_info_->batch_calls()};
}

std::optional<v1::InfoResponse> Cluster::draft_info() const {
  std::lock_guard<std::mutex> l(mu_);
  return draft_info_;
}

void Cluster::ReportTargetFailure(const absl::Status& st) {
  if (MeansDown(st.code())) {
    std::lock_guard<std::mutex> l(mu_);
    if (target_) SPECD_LOG(WARN) << "target worker failed a call" << Kv("error", st.ToString());
    target_.reset();
  }
  Wake();
}

void Cluster::ReportDraftFailure(const absl::Status& st) {
  if (MeansDown(st.code())) {
    std::lock_guard<std::mutex> l(mu_);
    if (draft_info_ && !paused_) {
      SPECD_LOG(WARN) << "draft worker failed a call; requests continue target-only" << Kv("error", st.ToString());
      draft_info_.reset();
    }
  }
  Wake();
}

absl::StatusOr<v1::InfoResponse> Cluster::SwapDraft(const std::string& path) {
  std::lock_guard<std::mutex> swap_lock(swap_mu_);
  if (!draft_stub_) return absl::FailedPreconditionError("this coordinator has no draft worker (--draft is empty)");
  if (path.empty()) return absl::InvalidArgumentError("SwapDraft needs a model path");
  std::shared_ptr<const TargetView> t = target();
  if (!t) return absl::UnavailableError("the target worker is not connected: cannot check the new draft's vocabulary");
  {
    std::lock_guard<std::mutex> l(mu_);
    paused_ = true;  // requests run target-only until the new draft is attached
  }
  SPECD_LOG(INFO) << "draft swap: pausing speculation" << Kv("path", path);
  auto unpause = [&] {
    {
      std::lock_guard<std::mutex> l(mu_);
      paused_ = false;
    }
    Wake();
  };
  v1::LoadModelRequest lreq;
  lreq.set_path(path);
  lreq.set_expected_vocab_digest(t->info.vocab_digest());
  v1::LoadModelResponse lresp;
  grpc::ClientContext lctx;
  lctx.set_deadline(std::chrono::system_clock::now() + opts_.swap_timeout);
  const grpc::Status ls = draft_stub_->LoadModel(&lctx, lreq, &lresp);
  if (!ls.ok()) {
    SPECD_LOG(WARN) << "draft swap refused; the current draft keeps serving" << Kv("path", path)
                    << Kv("error", ls.error_message());
    unpause();
    return rpc::FromGrpc(ls);
  }
  const v1::InfoResponse& info = lresp.info();
  std::lock_guard<std::mutex> attach_lock(attach_mu_);  // no prober attaches the old buffer meanwhile
  v1::AttachDraftRequest areq;
  *areq.mutable_exchange() = info.exchange();
  v1::AttachDraftResponse aresp;
  grpc::ClientContext actx;
  actx.set_deadline(std::chrono::system_clock::now() + opts_.probe_timeout);
  const grpc::Status as = target_stub_->AttachDraft(&actx, areq, &aresp);
  {
    std::lock_guard<std::mutex> l(mu_);
    draft_info_ = info;
    last_draft_pid_ = info.pid();
    last_exchange_ = info.exchange().name();
    ++epoch_;  // the old model's sequences are gone: requests reopen on the new one
    ++swaps_;
    if (as.ok()) {
      attached_name_ = info.exchange().name();
      attached_target_pid_ = t->info.pid();
      attached_pipelines_ = aresp.pipelined_verify();
    }
  }
  unpause();
  if (!as.ok()) {
    return absl::UnavailableError(absl::StrCat("the draft now serves ", path,
                                               " but the target did not attach its buffer yet: ", as.error_message()));
  }
  SPECD_LOG(INFO) << "draft swap done; speculation resumes" << Kv("path", path) << Kv("model", info.model_name())
                  << Kv("exchange", info.exchange().name());
  return info;
}

uint64_t Cluster::draft_epoch() const {
  std::lock_guard<std::mutex> l(mu_);
  return epoch_;
}

int64_t Cluster::draft_swaps() const {
  std::lock_guard<std::mutex> l(mu_);
  return swaps_;
}

int64_t Cluster::draft_reconnects() const {
  std::lock_guard<std::mutex> l(mu_);
  return reconnects_;
}

}  // namespace specd
