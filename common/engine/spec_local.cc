#include "common/engine/spec_local.h"

#include <set>

namespace specd {

// ---------------------------------------------------------------- LocalDraft

absl::StatusOr<std::unique_ptr<LocalDraft>> LocalDraft::Create(Engine* engine, int k_max, const std::string& shm_kind) {
  if (k_max < 1 || k_max > ExchangeBuffer::kMaxK)
    return absl::InvalidArgumentError(absl::StrCat("k_max ", k_max, " out of range [1, ", ExchangeBuffer::kMaxK, "]"));
  std::unique_ptr<LocalDraft> d(new LocalDraft(engine));
  d->k_max_ = k_max;
  const int slots = engine->options().max_seqs;
  SPECD_ASSIGN_OR_RETURN(d->xb_, ExchangeBuffer::Create(shm_kind, slots, k_max, engine->vocab_size(),
                                                        engine->tokenizer().VocabDigest()));
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

std::vector<absl::StatusOr<DraftProposal>> LocalDraft::ProposeBatch(const std::vector<ProposeJob>& jobs) {
  std::vector<absl::StatusOr<DraftProposal>> out(jobs.size(), absl::UnknownError("not run"));
  std::vector<ProposeRequest> reqs;
  std::vector<float*> q_out;
  std::vector<size_t> job_of;
  std::set<int32_t> seen;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const ProposeJob& j = jobs[i];
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
    reqs.push_back(ProposeRequest{j.seq, j.k, j.min_confidence});
    q_out.push_back(xb_->BeginWrite(it->second));
    job_of.push_back(i);
  }
  if (reqs.empty()) return out;
  std::vector<Proposal> props = core_.Propose(reqs, q_out);
  for (size_t n = 0; n < props.size(); ++n) {
    const size_t i = job_of[n];
    if (!props[n].status.ok()) {
      out[i] = props[n].status;
      continue;
    }
    const int slot = slot_of_[jobs[i].seq];
    DraftProposal p;
    p.tokens = std::move(props[n].tokens);
    p.confidence = std::move(props[n].confidence);
    p.ref.slot = slot;
    p.ref.generation = xb_->Publish(slot, jobs[i].seq, p.tokens);
    out[i] = std::move(p);
  }
  return out;
}

absl::StatusOr<DraftProposal> LocalDraft::Propose(int32_t seq, int64_t base_len, const std::vector<int32_t>& new_tokens,
                                                  int k, float min_confidence, Deadline) {
  return std::move(ProposeBatch({ProposeJob{seq, base_len, new_tokens, k, min_confidence}})[0]);
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
  xb_ = std::move(xb);
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

std::vector<absl::StatusOr<TargetStep>> LocalTarget::VerifyBatch(const std::vector<VerifyJob>& jobs) {
  std::vector<absl::StatusOr<TargetStep>> out(jobs.size(), absl::UnknownError("not run"));
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
      // A snapshot: the draft may reuse the slot once this returns.
      if (absl::Status st = xb_->Read(j.ref, j.seq, j.tokens, &q[i]); !st.ok()) {
        out[i] = st;
        continue;
      }
    }
    reqs.push_back(VerifyRequest{j.seq, j.tokens, j.tokens.empty() ? nullptr : q[i].data()});
    job_of.push_back(i);
  }
  if (reqs.empty()) return out;
  std::vector<VerifyResult> res = core_.Verify(reqs);
  for (size_t n = 0; n < res.size(); ++n) {
    const size_t i = job_of[n];
    if (!res[n].status.ok()) {
      out[i] = res[n].status;
      continue;
    }
    out[i] = TargetStep{res[n].n_accepted, std::move(res[n].appended)};
  }
  return out;
}

absl::StatusOr<TargetStep> LocalTarget::Verify(int32_t seq, const std::vector<int32_t>& proposal, const ExchangeRef& ref,
                                               Deadline) {
  return std::move(VerifyBatch({VerifyJob{seq, proposal, ref}})[0]);
}

}  // namespace specd
