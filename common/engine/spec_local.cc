#include "common/engine/spec_local.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <tuple>
#include <utility>

#include "common/util/log.h"

namespace specd {

namespace {

// Puts a batch's members in a canonical order: a forward's shape (and so its
// CUDA graph) then depends on the lengths the members bring, not on the order
// their calls arrived in. Six lockstep streams drafting 0 or 4 tokens each
// make up to 64 orders of one mix, each a graph to capture (twice cold) and
// to keep among the backend's 64. `key(n)` sorts ascending; ties by seq.
template <typename Key>
std::vector<size_t> CanonicalOrder(size_t n, const Key& key) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  return order;
}

template <typename T>
void Permute(std::vector<T>* v, const std::vector<size_t>& order) {
  std::vector<T> out;
  out.reserve(order.size());
  for (size_t i : order) out.push_back(std::move((*v)[i]));
  *v = std::move(out);
}

}  // namespace

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
  if (!d->dev_ && !engine->backend()->HostMemory()) {
    // The sampler writes where the logits are; the rows are copied to the host rows after.
    SPECD_ASSIGN_OR_RETURN(void* rows, engine->backend()->AllocBuffer(d->xb_->DeviceRowsBytes()));
    d->rows_ = static_cast<float*>(rows);
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
    const int slot = it->second;
    float* host_rows = xb_->BeginWrite(slot);  // the slot is being written until Publish
    DraftJob dj{j.seq, j.k, j.min_confidence, j.want_confidence, nullptr};
    // Greedy: q is one-hot at the tokens, no rows. Sampled: the sampler writes
    // them where the target reads them best.
    if (!core_.Get(j.seq)->sampling.greedy()) {
      if (dev_) dj.q = dev_->Rows(slot);
      else if (rows_) dj.q = rows_ + xb_->DeviceSlotOffset(slot) / sizeof(float);
      else dj.q = host_rows;
    }
    reqs.push_back(dj);
    job_of.push_back(i);
  }
  if (reqs.empty()) return out;
  {
    // Longest proposals first (then the most tokens to feed before drafting:
    // the committed tokens past what the draft holds, one or two after a
    // step): the later forwards, where the shorter ones have stopped, are a prefix.
    const auto order = CanonicalOrder(reqs.size(), [&](size_t n) {
      const SeqState* s = core_.Get(reqs[n].seq);
      const int64_t unfed = static_cast<int64_t>(s->committed.size()) - static_cast<int64_t>(s->fed.size());
      return std::make_tuple(-reqs[n].k, -unfed, reqs[n].seq);
    });
    Permute(&reqs, order);
    Permute(&job_of, order);
  }
  // A plain step feeds one or two tokens before drafting (the correction or
  // the last draft and the bonus: at most one pending besides the input);
  // more: a member catching up.
  bool caught_up = false;
  for (const DraftJob& j : reqs) caught_up |= core_.PrefillPending(j.seq) > 1;
  CoreTimes times;
  std::vector<DraftResult> props = core_.Propose(reqs, &times);
  // The batch every proposal waited for: the sequences that drafted, and the forwards run (its longest member's).
  int batch_seqs = 0, batch_forwards = 0, shortest = 0;
  for (const DraftResult& r : props) {
    if (r.forwards <= 0) continue;
    ++batch_seqs;
    batch_forwards = std::max(batch_forwards, r.forwards);
    shortest = shortest == 0 ? r.forwards : std::min(shortest, r.forwards);
  }
  const bool mixed = caught_up || shortest != batch_forwards;
  const size_t V = static_cast<size_t>(xb_->vocab());
  for (size_t n = 0; n < props.size(); ++n) {
    const size_t i = job_of[n];
    if (!props[n].status.ok()) {
      out[i] = props[n].status;
      continue;
    }
    const int slot = slot_of_[jobs[i].seq];
    uint32_t rows = 0;
    if (reqs[n].q && !props[n].tokens.empty()) {
      rows = dev_ ? ExchangeBuffer::kRowsDevice : (rows_ ? 0u : ExchangeBuffer::kRowsHost);
      // Host rows from the sampler's rows: when they are not on the host and
      // a reader needs them there (no device rows, or a target that asked).
      if (!(rows & ExchangeBuffer::kRowsHost) && (!dev_ || xb_->host_rows_requested())) {
        const size_t bytes = sizeof(float) * props[n].tokens.size() * V;
        if (absl::Status st = engine()->Read(reqs[n].q, xb_->BeginWrite(slot), bytes); !st.ok()) {
          out[i] = absl::InternalError(absl::StrCat("copying the draft's rows to the host: ", st.message()));
          continue;
        }
        rows |= ExchangeBuffer::kRowsHost;
      }
    }
    Proposal p;
    p.tokens = std::move(props[n].tokens);
    p.confidence = std::move(props[n].confidence);
    p.ref.slot = slot;
    p.ref.generation = xb_->Publish(slot, jobs[i].seq, p.tokens, rows);
    p.figures.forwards = props[n].forwards;
    p.figures.forward_seconds = times.forward;
    p.figures.batch_seqs = batch_seqs;
    p.figures.batch_forwards = batch_forwards;
    p.figures.batch_mixed = mixed;
    p.figures.cold = times.cold;
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
  std::unique_ptr<DeviceRowsImport> dev;
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
  if (!dev_ && xb_->device_rows()) RequestHostRows();
  SPECD_LOG(INFO) << "target exchange path: " << (dev_ ? "device" : "host") << Kv("kind", xb_->kind())
                  << Kv("exchange", name) << Kv("detail", path_);
  return absl::OkStatus();
}

void LocalTarget::RequestHostRows() {
  if (xb_->host_rows_requested()) return;
  if (xb_->RequestHostRows()) {
    SPECD_LOG(INFO) << "asked the draft for host rows" << Kv("exchange", xb_->name());
  } else {
    SPECD_LOG(WARN) << "cannot ask the draft for host rows (its exchange buffer is mapped read-only); sampled "
                       "proposals with device rows only will be refused"
                    << Kv("exchange", xb_->name());
  }
}

absl::Status LocalTarget::RowsFor(const VerifyJob& j, const float** q, Rows* from) {
  *q = nullptr;
  *from = Rows::kOneHot;
  if (j.ref.slot < 0) return absl::OkStatus();  // a deterministic proposal: no rows anywhere
  if (!xb_) return absl::FailedPreconditionError("no draft exchange buffer is attached to the target");
  SPECD_ASSIGN_OR_RETURN(const uint32_t rows, xb_->Check(j.ref, j.seq, j.tokens));
  if (rows == 0) return absl::OkStatus();  // a greedy draft: one-hot
  if (dev_ && (rows & ExchangeBuffer::kRowsDevice)) {
    auto r = dev_->Rows(j.ref.slot);
    if (r.ok()) {
      *q = *r;
      *from = Rows::kDevice;
      return absl::OkStatus();
    }
    // The host rows from now on (this proposal has them only if a host reader asked before).
    ++counts_.device_failures;
    SPECD_LOG(WARN) << "reading the draft's device rows failed; verifying from host rows from now on"
                    << Kv("error", r.status().ToString());
    dev_.reset();
    path_ = absl::StrCat("host (device rows failed: ", r.status().message(), ")");
    RequestHostRows();
  }
  if (!(rows & ExchangeBuffer::kRowsHost)) {
    RequestHostRows();
    return absl::FailedPreconditionError(absl::StrCat(
        "draft proposal in exchange slot ", j.ref.slot, " generation ", j.ref.generation,
        " is unusable: its rows are on the device only (the draft was asked for host rows from now on)"));
  }
  const float* host = xb_->HostRows(j.ref.slot);
  *from = Rows::kHost;
  if (engine()->backend()->HostMemory()) {
    *q = host;  // in place
    return absl::OkStatus();
  }
  // A target on a device reading host rows: upload them (the fallback path).
  const size_t bytes = xb_->DeviceRowsBytes();
  if (stage_bytes_ < bytes) {
    SPECD_ASSIGN_OR_RETURN(void* buf, engine()->backend()->AllocBuffer(bytes));
    stage_ = static_cast<float*>(buf);
    stage_bytes_ = bytes;
  }
  float* dst = stage_ + xb_->DeviceSlotOffset(j.ref.slot) / sizeof(float);
  SPECD_RETURN_IF_ERROR(engine()->backend()->WriteBytes(host, dst, sizeof(float) * j.tokens.size() * xb_->vocab()));
  *q = dst;
  return absl::OkStatus();
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
  std::vector<VerifyRequest> reqs;
  std::vector<size_t> job_of;
  std::vector<Rows> from;
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
    VerifyRequest vr{j.seq, j.tokens, nullptr, {}};
    Rows rows = Rows::kOneHot;
    if (!j.tokens.empty()) {
      if (absl::Status st = RowsFor(j, &vr.q, &rows); !st.ok()) {
        out[i] = st;
        continue;
      }
      if (vr.q) {
        // Read in place after this check: they count only if the slot still holds them.
        const ExchangeRef ref = j.ref;
        vr.still_valid = [this, ref]() -> absl::Status {
          if (xb_->Current(ref)) return absl::OkStatus();
          return absl::FailedPreconditionError(absl::StrCat("draft proposal in exchange slot ", ref.slot, " generation ",
                                                            ref.generation,
                                                            " is unusable: the draft rewrote the slot while it was read"));
        };
      }
    }
    reqs.push_back(std::move(vr));
    job_of.push_back(i);
    from.push_back(rows);
  }
  if (reqs.empty()) return out;
  {
    const auto order = CanonicalOrder(reqs.size(), [&](size_t n) {
      return std::make_pair(-static_cast<int64_t>(reqs[n].proposals.size()), reqs[n].seq);
    });
    Permute(&reqs, order);
    Permute(&job_of, order);
    Permute(&from, order);
  }
  int batch_tokens = 0;
  bool fed_more = false;  // a member also feeds pending prompt tokens (more than its last committed one)
  for (const VerifyRequest& r : reqs) {
    batch_tokens += static_cast<int>(r.proposals.size()) + 1;
    fed_more |= core_.PrefillPending(r.seq) > 0;
  }
  CoreTimes times;
  std::vector<VerifyResult> res = core_.Verify(reqs, &times);
  const double worker = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (size_t n = 0; n < res.size(); ++n) {
    const size_t i = job_of[n];
    if (!res[n].status.ok()) {
      out[i] = res[n].status;
      continue;
    }
    if (!jobs[i].tokens.empty()) {
      switch (from[n]) {
        case Rows::kOneHot: ++counts_.one_hot; break;
        case Rows::kHost: ++counts_.host; break;
        case Rows::kDevice:
          ++counts_.device;
          if (!logged_first_device_) {
            logged_first_device_ = true;
            SPECD_LOG(INFO) << "first acceptance on the device" << Kv("exchange", xb_->name())
                            << Kv("proposed", jobs[i].tokens.size()) << Kv("accepted", res[n].n_accepted);
          }
          break;
      }
    }
    out[i] = Verdict{res[n].n_accepted, std::move(res[n].appended), std::move(res[n].logprobs),
                     VerifyFigures{times.forward, times.accept, worker, 0.0, 0.0, static_cast<int>(reqs.size()),
                                   batch_tokens, times.cold, fed_more}};
  }
  return out;
}

absl::StatusOr<Verdict> LocalTarget::Verify(int32_t seq, const std::vector<int32_t>& proposal, const ExchangeRef& ref,
                                            const CohortTag&, Deadline) {
  return std::move(VerifyBatch({VerifyJob{seq, proposal, ref}})[0]);
}

}  // namespace specd
