#include "common/engine/spec_local.h"

#include <chrono>
#include <set>

#include "common/util/log.h"

namespace specd {

// ---------------------------------------------------------------- LocalDraft

absl::StatusOr<std::unique_ptr<LocalDraft>> LocalDraft::Create(Engine* engine, int k_max, const std::string& shm_kind) {
  if (k_max < 1 || k_max > ExchangeBuffer::kMaxK)
    return absl::InvalidArgumentError(absl::StrCat("k_max ", k_max, " out of range [1, ", ExchangeBuffer::kMaxK, "]"));
  if (shm_kind != "posix" && shm_kind != "cuda" && shm_kind != "auto")
    return absl::InvalidArgumentError(absl::StrCat("unknown exchange kind '", shm_kind, "' (posix, cuda or auto)"));
  std::unique_ptr<LocalDraft> d(new LocalDraft(engine));
  d->k_max_ = k_max;
  const int slots = engine->options().max_seqs;
  // Header, generations, tokens and host rows are POSIX shared memory for every kind.
  SPECD_ASSIGN_OR_RETURN(d->xb_, ExchangeBuffer::Create("posix", slots, k_max, engine->vocab_size(),
                                                        engine->tokenizer().VocabDigest()));
  std::string why_host = "exchange kind posix requested";
  if (shm_kind != "posix") {
    absl::Status st = DeviceExchangeSupport(*engine);
    if (st.ok()) {
      auto dev = ExportDeviceRows(*engine, d->xb_.get());
      if (dev.ok()) {
        d->dev_ = std::move(*dev);
      } else {
        st = dev.status();
      }
    }
    if (!st.ok()) {
      if (shm_kind == "cuda")
        return absl::FailedPreconditionError(absl::StrCat("exchange kind cuda is unavailable: ", st.message()));
      why_host = std::string(st.message());
      // A CUDA draft that wanted device rows but could not have them is worth a warning.
      if (engine->options().backend.name == "cuda")
        SPECD_LOG(WARN) << "CUDA IPC export of the exchange rows failed; the target will read host rows"
                        << Kv("error", st.ToString());
    }
  }
  d->path_ = d->dev_ ? absl::StrCat("device (", d->dev_->Describe(), ")") : absl::StrCat("host (", why_host, ")");
  SPECD_LOG(INFO) << "draft exchange path: " << (d->dev_ ? "device" : "host") << Kv("kind", d->xb_->kind())
                  << Kv("exchange", d->xb_->name()) << Kv("detail", d->path_);
  for (int s = slots - 1; s >= 0; --s) d->free_slots_.push_back(s);
  return d;
}

absl::Status LocalDraft::OpenSeq(int32_t seq, const std::vector<int32_t>& tokens, const SamplingParams& sampling,
                                 bool prefill) {
  ReleaseSeq(seq);
  if (free_slots_.empty())
    return absl::ResourceExhaustedError(absl::StrCat("all ", xb_->n_slots(), " draft sequence slots are in use"));
  SPECD_RETURN_IF_ERROR(core_.Open(seq, tokens, sampling, prefill));
  slot_of_[seq] = free_slots_.back();
  free_slots_.pop_back();
  return absl::OkStatus();
}

absl::Status LocalDraft::SyncSeq(int32_t seq, int64_t base_len, const std::vector<int32_t>& tokens) {
  return core_.Sync(seq, base_len, tokens);
}

bool LocalDraft::ReleaseSeq(int32_t seq) {
  auto it = slot_of_.find(seq);
  if (it == slot_of_.end()) return false;
  free_slots_.push_back(it->second);
  slot_of_.erase(it);
  core_.Release(seq);
  return true;
}

std::vector<absl::StatusOr<Proposal>> LocalDraft::ProposeBatch(const std::vector<ProposeRequest>& jobs) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<absl::StatusOr<Proposal>> out(jobs.size(), absl::UnknownError("not run"));
  std::vector<DraftJob> reqs;
  std::vector<float*> q_out;
  std::vector<size_t> job_of;
  std::set<int32_t> seen;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const ProposeRequest& j = jobs[i];
    auto it = slot_of_.find(j.seq);
    if (it == slot_of_.end()) {
      out[i] = absl::NotFoundError(absl::StrCat("sequence ", j.seq, " is not open on the draft"));
      continue;
    }
    if (j.k < 0 || j.k > k_max_) {
      out[i] = absl::InvalidArgumentError(absl::StrCat("k ", j.k, " out of range [0, ", k_max_, "]"));
      continue;
    }
    if (!seen.insert(j.seq).second) {
      out[i] = absl::InvalidArgumentError(absl::StrCat("sequence ", j.seq, " proposed twice in one batch"));
      continue;
    }
    if (absl::Status st = core_.Sync(j.seq, j.base_len, j.new_tokens); !st.ok()) {
      out[i] = st;
      continue;
    }
    reqs.push_back(DraftJob{j.seq, j.k, j.min_confidence});
    q_out.push_back(xb_->BeginWrite(it->second));
    job_of.push_back(i);
  }
  if (reqs.empty()) return out;
  CoreTimes times;
  std::vector<DraftResult> props = core_.Propose(reqs, q_out, &times);
  if (dev_) {
    // Kind "cuda": the rows reach the device before any generation is published.
    absl::Status st;
    for (size_t n = 0; n < props.size() && st.ok(); ++n) {
      if (props[n].status.ok() && !props[n].tokens.empty())
        st = dev_->Enqueue(slot_of_[jobs[job_of[n]].seq], static_cast<int>(props[n].tokens.size()));
    }
    if (st.ok()) st = dev_->Wait();
    if (!st.ok()) {
      SPECD_LOG(WARN) << "copying proposals to the device failed" << Kv("error", st.ToString());
      for (auto& p : props) {
        if (p.status.ok()) p.status = absl::InternalError(absl::StrCat("draft device rows: ", st.message()));
      }
    }
  }
  for (size_t n = 0; n < props.size(); ++n) {
    const size_t i = job_of[n];
    if (!props[n].status.ok()) {
      out[i] = props[n].status;
      continue;
    }
    const int slot = slot_of_[jobs[i].seq];
    Proposal p;
    p.tokens = std::move(props[n].tokens);
    p.confidence = std::move(props[n].confidence);
    p.ref.slot = slot;
    p.ref.generation = xb_->Publish(slot, jobs[i].seq, p.tokens);
    p.figures.forwards = props[n].forwards;
    p.figures.forward_seconds = times.forward;
    out[i] = std::move(p);
  }
  // Every proposal of the batch waited for all of it.
  const double worker = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto& p : out) {
    if (p.ok()) p->figures.worker_seconds = worker;
  }
  return out;
}

absl::StatusOr<Proposal> LocalDraft::Propose(const ProposeRequest& req, Deadline) {
  return std::move(ProposeBatch({req})[0]);
}

// ---------------------------------------------------------------- LocalTarget

LocalTarget::LocalTarget(Engine* engine) : core_(engine), digest_(engine->tokenizer().VocabDigest()) {}

absl::Status LocalTarget::Attach(const std::string& kind, const std::string& name) {
  SPECD_ASSIGN_OR_RETURN(auto xb, ExchangeBuffer::Attach(kind, name));
  if (xb->vocab() != engine()->vocab_size())
    return absl::FailedPreconditionError(absl::StrCat("draft exchange buffer '", name, "' is for a vocabulary of ",
                                                      xb->vocab(), " tokens; the target has ", engine()->vocab_size()));
  if (xb->vocab_digest() != digest_)
    return absl::FailedPreconditionError(absl::StrCat("draft exchange buffer '", name, "' has vocabulary digest ",
                                                      xb->vocab_digest(), "; the target's is ", digest_));
  // The device path when both sides can have it; the host rows otherwise.
  std::unique_ptr<DeviceAcceptor> dev;
  std::string why_host;
  if (!xb->device_rows()) {
    why_host = "the draft exports host rows only (kind posix)";
  } else if (prefer_host_) {
    why_host = "this target is set to read host rows";
  } else if (absl::Status st = DeviceExchangeSupport(*engine()); !st.ok()) {
    why_host = absl::StrCat("the draft exports device rows but ", st.message());
  } else {
    auto d = OpenDeviceRows(*engine(), *xb);
    if (d.ok()) {
      dev = std::move(*d);
    } else {
      why_host = absl::StrCat("mapping the draft's device rows failed: ", d.status().ToString());
      SPECD_LOG(WARN) << "CUDA IPC open of the draft's exchange rows failed; verifying from host rows"
                      << Kv("exchange", name) << Kv("error", d.status().ToString());
    }
  }
  dev_.reset();  // the old mapping first: it refers to the old buffer
  xb_ = std::move(xb);
  dev_ = std::move(dev);
  logged_first_device_ = false;
  path_ = dev_ ? absl::StrCat("device (", dev_->Describe(), ")") : absl::StrCat("host (", why_host, ")");
  SPECD_LOG(INFO) << "target exchange path: " << (dev_ ? "device" : "host") << Kv("kind", xb_->kind())
                  << Kv("exchange", name) << Kv("detail", path_);
  return absl::OkStatus();
}

absl::StatusOr<AcceptResult> LocalTarget::AcceptOnDevice(const VerifyJob& j, const std::vector<TokenDist>& p,
                                                         uint64_t seed, int64_t pos0) {
  if (dev_) {
    auto r = dev_->Accept(j.ref.slot, p, j.tokens, seed, pos0);
    // The rows were read in place: they count only if the slot still holds them.
    if (r.ok() && !xb_->Current(j.ref))
      return absl::FailedPreconditionError(absl::StrCat("draft proposal in exchange slot ", j.ref.slot,
                                                        " generation ", j.ref.generation,
                                                        " is unusable: the draft rewrote the slot while it was read"));
    if (r.ok()) {
      ++counts_.device;
      if (!logged_first_device_) {
        logged_first_device_ = true;
        SPECD_LOG(INFO) << "first acceptance on the device" << Kv("exchange", xb_->name())
                        << Kv("proposed", j.tokens.size()) << Kv("accepted", r->n_accepted);
      }
      return r;
    }
    // The host rows hold the same proposal: finish this step there, and stay there.
    ++counts_.device_failures;
    SPECD_LOG(WARN) << "device acceptance failed; verifying from host rows from now on" << Kv("error", r.status().ToString());
    dev_.reset();
    path_ = absl::StrCat("host (device acceptance failed: ", r.status().message(), ")");
  }
  std::vector<float> q;
  SPECD_RETURN_IF_ERROR(xb_->Read(j.ref, j.seq, j.tokens, &q));
  ++counts_.host;
  return VerifyProposals(p, q.data(), j.tokens.data(), static_cast<int>(j.tokens.size()), engine()->vocab_size(), seed,
                         pos0);
}

absl::Status LocalTarget::OpenSeq(int32_t seq, const std::vector<int32_t>& tokens, const SamplingParams& sampling,
                                  bool prefill) {
  core_.Release(seq);
  return core_.Open(seq, tokens, sampling, prefill);
}

absl::Status LocalTarget::SyncSeq(int32_t seq, int64_t base_len, const std::vector<int32_t>& tokens) {
  return core_.Sync(seq, base_len, tokens);
}

bool LocalTarget::ReleaseSeq(int32_t seq) {
  if (!core_.Has(seq)) return false;
  core_.Release(seq);
  return true;
}

std::vector<absl::StatusOr<Verdict>> LocalTarget::VerifyBatch(const std::vector<VerifyJob>& jobs) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<absl::StatusOr<Verdict>> out(jobs.size(), absl::UnknownError("not run"));
  std::vector<std::vector<float>> q(jobs.size());
  std::vector<VerifyRequest> reqs;
  std::vector<size_t> job_of;
  std::set<int32_t> seen;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const VerifyJob& j = jobs[i];
    if (!core_.Has(j.seq)) {
      out[i] = absl::NotFoundError(absl::StrCat("sequence ", j.seq, " is not open on the target"));
      continue;
    }
    if (!seen.insert(j.seq).second) {
      out[i] = absl::InvalidArgumentError(absl::StrCat("sequence ", j.seq, " verified twice in one batch"));
      continue;
    }
    if (!j.tokens.empty()) {
      if (!xb_) {
        out[i] = absl::FailedPreconditionError("no draft exchange buffer is attached to the target");
        continue;
      }
      if (dev_) {
        // Device path: checked now, read in place by the device after the forward.
        if (absl::Status st = xb_->Check(j.ref, j.seq, j.tokens); !st.ok()) {
          out[i] = st;
          continue;
        }
        VerifyRequest vr{j.seq, j.tokens, nullptr, {}};
        vr.accept = [this, &j](const std::vector<TokenDist>& p, uint64_t seed, int64_t pos0) {
          return AcceptOnDevice(j, p, seed, pos0);
        };
        reqs.push_back(std::move(vr));
        job_of.push_back(i);
        continue;
      }
      // A snapshot: the draft may reuse the slot once this returns.
      if (absl::Status st = xb_->Read(j.ref, j.seq, j.tokens, &q[i]); !st.ok()) {
        out[i] = st;
        continue;
      }
      ++counts_.host;
    }
    reqs.push_back(VerifyRequest{j.seq, j.tokens, j.tokens.empty() ? nullptr : q[i].data(), {}});
    job_of.push_back(i);
  }
  if (reqs.empty()) return out;
  CoreTimes times;
  std::vector<VerifyResult> res = core_.Verify(reqs, &times);
  const double worker = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (size_t n = 0; n < res.size(); ++n) {
    const size_t i = job_of[n];
    if (!res[n].status.ok()) {
      out[i] = res[n].status;
      continue;
    }
    out[i] = Verdict{res[n].n_accepted, std::move(res[n].appended), VerifyFigures{times.forward, times.accept, worker}};
  }
  return out;
}

absl::StatusOr<Verdict> LocalTarget::Verify(int32_t seq, const std::vector<int32_t>& proposal, const ExchangeRef& ref,
                                            Deadline) {
  return std::move(VerifyBatch({VerifyJob{seq, proposal, ref}})[0]);
}

}  // namespace specd
