#include "draft_worker/draft_service.h"

#include <chrono>

#include "common/util/log.h"
#include "proto/rpc/convert.h"
#include "proto/rpc/status.h"

namespace specd {

using rpc::ToGrpc;
using rpc::ToVector;

absl::StatusOr<std::unique_ptr<DraftService>> DraftService::Create(const DraftWorkerOptions& opts) {
  std::unique_ptr<DraftService> s(new DraftService(opts));
  SPECD_ASSIGN_OR_RETURN(s->cur_, s->Load(opts.engine.model_path, ""));
  s->path_ = opts.engine.model_path;
  s->loads_ = 1;
  DraftService* self = s.get();
  s->StartThread([self](const std::vector<ProposeRequest>& jobs) { return self->RunBatch(jobs); },
                 [](const ProposeRequest& j) { return static_cast<int64_t>(j.seq); },
                 [](const ProposeRequest& j) { return j.cohort; }, opts.scheduler);
  s->FollowExporter();
  return s;
}

void DraftService::FollowExporter() {
  const Engine& e = *cur_.engine;
  if (!watch_ && (!e.registry() || e.shared_from().pid == 0)) return;  // nothing mapped, nothing followed yet
  if (!watch_) {
    auto reg = DeviceRegistry::Open(e.registry()->root(), e.registry()->device());
    if (!reg.ok()) {
      // Without a watch the mapping could outlive its target: do not keep it.
      SPECD_LOG(ERROR) << "cannot watch the process whose weights the draft maps" << Kv("error", reg.status().message());
      return;
    }
    watch_ = std::make_unique<ExporterWatch>(*std::move(reg),
                                             ExporterWatch::Callbacks{[this](const ProcessId& p) { Unload(p); },
                                                                      [this] { return Reload(); }});
  }
  watch_->Follow(e.shared_from());
}

absl::Status DraftService::HostReady() {
  if (cur_.draft) return absl::OkStatus();
  return absl::UnavailableError(unloaded_why_);
}

void DraftService::Unload(const ProcessId& gone) {
  thread_->Run([&] {
    if (!cur_.engine || cur_.engine->shared_from() != gone) return;  // a swap replaced that model meanwhile
    const size_t dropped = cur_.draft->core().Sequences().size();
    cur_.draft.reset();   // the exchange buffer first: it refers to the engine
    cur_.engine.reset();  // closes the mapping: the dead target's memory is released
    cur_.digest.clear();
    unloaded_why_ = absl::StrCat("the draft model is unloaded: the target process (pid ", gone.pid,
                                 ") whose weights it mapped has exited; it loads again when a target is ready on "
                                 "this device");
    SPECD_LOG(WARN) << "draft model unloaded" << Kv("path", path_) << Kv("dropped_sequences", dropped)
                    << Kv("exporter_pid", gone.pid);
  });
}

absl::StatusOr<ProcessId> DraftService::Reload() {
  return thread_->Run([&]() -> absl::StatusOr<ProcessId> {
    if (cur_.engine) return cur_.engine->shared_from();  // a swap loaded one meanwhile
    SPECD_ASSIGN_OR_RETURN(cur_, Load(path_, ""));
    loads_.fetch_add(1);
    SPECD_LOG(INFO) << "draft model loaded again" << Kv("path", path_)
                    << Kv("weights", cur_.engine->weight_sharing());
    return cur_.engine->shared_from();
  });
}

absl::StatusOr<DraftService::Loaded> DraftService::Load(const std::string& path, const std::string& expected) const {
  // The vocabulary decides compatibility; check it before loading any weights.
  SPECD_ASSIGN_OR_RETURN(auto file, GgufFile::Open(path));
  SPECD_ASSIGN_OR_RETURN(auto tok, Tokenizer::FromGguf(*file));
  const std::string digest = tok->VocabDigest();
  if (!expected.empty() && digest != expected)
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": vocabulary (digest ", digest.substr(0, 16), "..., ", tok->vocab_size(),
        " tokens) differs from the target's (digest ", expected.substr(0, 16), "...); refusing it, the current draft stays"));
  EngineOptions eo = opts_.engine;
  eo.model_path = path;
  eo.role = "draft";
  eo.exchange_bytes = static_cast<int64_t>(ExchangeBuffer::BytesFor(eo.max_seqs, opts_.k_max, tok->vocab_size()));
  Loaded l;
  SPECD_ASSIGN_OR_RETURN(l.engine, Engine::Create(eo));
  SPECD_ASSIGN_OR_RETURN(l.draft, LocalDraft::Create(l.engine.get(), opts_.k_max, opts_.shm_kind));
  l.digest = digest;
  SPECD_LOG(INFO) << "draft model loaded" << Kv("path", path) << Kv("vocab", l.engine->vocab_size())
                  << Kv("exchange", l.draft->exchange().name()) << Kv("exchange_bytes", l.draft->exchange().bytes())
                  << Kv("weights", l.engine->weight_sharing());
  SPECD_LOG(INFO) << l.engine->ledger().ToString();
  return l;
}

std::vector<absl::StatusOr<Proposed>> DraftService::RunBatch(
    const std::vector<ProposeRequest>& jobs) {
  if (absl::Status st = HostReady(); !st.ok()) return std::vector<absl::StatusOr<Proposed>>(jobs.size(), st);
  std::vector<absl::StatusOr<Proposal>> res = cur_.draft->ProposeBatch(jobs);
  std::vector<absl::StatusOr<Proposed>> out;
  out.reserve(res.size());
  for (size_t i = 0; i < res.size(); ++i) {
    if (!res[i].ok()) {
      out.push_back(res[i].status());
      continue;
    }
    out.push_back(Proposed{*std::move(res[i]), cur_.draft->core().CommittedLength(jobs[i].seq)});
  }
  return out;
}

void DraftService::FillInfo(v1::InfoResponse* out) const {
  rpc::EngineInfoToProto(*cur_.engine, cur_.digest, out);
  out->set_role("draft");
  rpc::ExchangeToProto(cur_.draft->exchange(), out->mutable_exchange());
  out->set_k_max(opts_.k_max);
  out->set_model_loads(loads_.load());
  out->set_batch_calls(true);
  if (thread_) SchedulerInfo(out);
}

v1::InfoResponse DraftService::CurrentInfo() {
  return thread_->Run([this] {
    v1::InfoResponse r;
    if (cur_.draft) FillInfo(&r);
    return r;
  });
}

grpc::Status DraftService::Info(grpc::ServerContext* ctx, const v1::InfoRequest*, v1::InfoResponse* resp) {
  if (auto st = rpc::Authorize(ctx); !st.ok()) return st;
  // Unloaded, it says why instead: the coordinator then runs requests target-only.
  return ToGrpc(thread_->Run([&]() -> absl::Status {
    SPECD_RETURN_IF_ERROR(HostReady());
    FillInfo(resp);
    return absl::OkStatus();
  }));
}

namespace {

ProposeRequest JobFromProto(const v1::ProposeRequest& req) {
  ProposeRequest job;
  job.seq = req.seq();
  job.base_len = req.base_len();
  job.new_tokens = ToVector(req.new_tokens());
  job.k = req.k();
  job.min_confidence = req.min_confidence();
  job.want_confidence = req.want_confidence();
  job.cohort = rpc::CohortFromProto(req.cohort());
  return job;
}

void FillPropose(const Proposed& r, std::chrono::steady_clock::time_point arrived, double behind_prefill,
                 v1::ProposeResponse* resp) {
  const Proposal& p = r.proposal;
  resp->mutable_tokens()->Add(p.tokens.begin(), p.tokens.end());
  resp->mutable_confidences()->Add(p.confidence.begin(), p.confidence.end());
  resp->set_slot(p.ref.slot);
  resp->set_generation(p.ref.generation);
  resp->set_length(r.length);
  resp->set_forwards(p.figures.forwards);
  resp->set_forward_seconds(p.figures.forward_seconds);
  resp->set_worker_seconds(p.figures.worker_seconds);
  resp->set_batch_seqs(p.figures.batch_seqs);
  resp->set_batch_forwards(p.figures.batch_forwards);
  resp->set_cold_forward(p.figures.cold);
  resp->set_batch_mixed(p.figures.batch_mixed);
  resp->set_call_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - arrived).count());
  resp->set_prefill_wait_seconds(behind_prefill);
}

}  // namespace

grpc::Status DraftService::Propose(grpc::ServerContext* ctx, const v1::ProposeRequest* req, v1::ProposeResponse* resp) {
  const auto arrived = std::chrono::steady_clock::now();
  if (auto st = rpc::Authorize(ctx); !st.ok()) return st;
  double behind_prefill = 0;
  auto r = thread_->Submit(JobFromProto(*req), &behind_prefill);
  if (!r.ok()) return ToGrpc(r.status());
  FillPropose(*r, arrived, behind_prefill, resp);
  return grpc::Status::OK;
}

grpc::Status DraftService::ProposeBatch(grpc::ServerContext* ctx, const v1::ProposeBatchRequest* req,
                                        v1::ProposeBatchResponse* resp) {
  const auto arrived = std::chrono::steady_clock::now();
  if (auto st = rpc::Authorize(ctx); !st.ok()) return st;
  if (auto st = CheckBatchCalls(req->calls_size(), opts_.engine.max_seqs); !st.ok()) return st;
  std::vector<ProposeRequest> jobs;
  jobs.reserve(req->calls_size());
  for (const v1::ProposeRequest& c : req->calls()) jobs.push_back(JobFromProto(c));
  std::vector<double> behind_prefill;
  std::vector<absl::StatusOr<Proposed>> res = thread_->SubmitAll(std::move(jobs), &behind_prefill);
  for (size_t j = 0; j < res.size(); ++j) {
    const absl::StatusOr<Proposed>& r = res[j];
    v1::ProposeResponse* reply = resp->add_replies();
    if (r.ok()) FillPropose(*r, arrived, behind_prefill[j], reply);
    rpc::ToCallStatus(r.status(), resp->add_status());
  }
  return grpc::Status::OK;
}

grpc::Status DraftService::LoadModel(grpc::ServerContext* ctx, const v1::LoadModelRequest* req,
                                     v1::LoadModelResponse* resp) {
  if (auto st = rpc::Authorize(ctx); !st.ok()) return st;
  if (req->path().empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "LoadModel needs a path");
  SPECD_LOG(INFO) << "loading a new draft model" << Kv("path", req->path());
  // On the engine thread: no proposal runs while the model changes. The old
  // model serves until the new one is fully loaded; any failure keeps it.
  absl::Status st = thread_->Run([&]() -> absl::Status {
    SPECD_ASSIGN_OR_RETURN(Loaded next, Load(req->path(), req->expected_vocab_digest()));
    const size_t dropped = cur_.draft ? cur_.draft->core().Sequences().size() : 0;
    cur_.draft.reset();  // unlinks the old buffer (a mapping the target holds stays valid)
    cur_ = std::move(next);
    path_ = req->path();
    loads_.fetch_add(1);
    SPECD_LOG(INFO) << "draft model swapped" << Kv("path", req->path()) << Kv("dropped_sequences", dropped)
                    << Kv("exchange", cur_.draft->exchange().name());
    FillInfo(resp->mutable_info());
    FollowExporter();  // the new model's exporter, or none (a pending reload is cancelled)
    return absl::OkStatus();
  });
  if (!st.ok()) SPECD_LOG(WARN) << "draft model load refused" << Kv("path", req->path()) << Kv("error", st.ToString());
  return ToGrpc(st);
}

}  // namespace specd
