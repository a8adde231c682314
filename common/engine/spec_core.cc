#include "common/engine/spec_core.h"

#include <algorithm>
#include <set>

#include "common/sampler/rng.h"

namespace specd {

absl::Status SeqCore::Open(int32_t seq, const std::vector<int32_t>& prompt, const SamplingParams& sampling,
                           bool prefill) {
  if (prompt.empty()) return absl::InvalidArgumentError("empty prompt");
  if (seqs_.count(seq)) return absl::AlreadyExistsError(absl::StrCat("sequence ", seq, " is already open"));
  SPECD_RETURN_IF_ERROR(sampling.Validate());
  if (static_cast<int64_t>(prompt.size()) >= engine_->options().max_seq_len)
    return absl::InvalidArgumentError(absl::StrCat("prompt of ", prompt.size(), " tokens does not fit max-seq-len ",
                                                   engine_->options().max_seq_len));
  for (int32_t t : prompt) {
    if (t < 0 || t >= engine_->vocab_size()) return absl::InvalidArgumentError(absl::StrCat("token id ", t, " out of range"));
  }
  SPECD_RETURN_IF_ERROR(engine_->NewSequence(seq));
  SeqState& s = seqs_[seq];
  s.committed = prompt;
  s.sampling = sampling;
  s.open_id = next_open_id_++;
  if (!prefill) return absl::OkStatus();
  auto r = Prefill({PrefillSlice{seq, static_cast<int64_t>(prompt.size())}});
  if (!r[0].ok()) {
    Release(seq);
    return r[0].status();
  }
  return absl::OkStatus();
}

int64_t SeqCore::PrefillPending(int32_t seq) const {
  const SeqState* s = Get(seq);
  if (!s) return -1;
  return std::max<int64_t>(0, static_cast<int64_t>(s->committed.size()) - 1 - static_cast<int64_t>(s->fed.size()));
}

std::vector<absl::StatusOr<int64_t>> SeqCore::Prefill(const std::vector<PrefillSlice>& slices) {
  std::vector<absl::StatusOr<int64_t>> out(slices.size(), int64_t{0});
  std::vector<Engine::Feed> feeds;
  std::vector<size_t> fed_slice;
  std::set<int32_t> seen;
  for (size_t i = 0; i < slices.size(); ++i) {
    const int64_t pending = PrefillPending(slices[i].seq);
    if (pending < 0) {
      out[i] = absl::NotFoundError(absl::StrCat("sequence ", slices[i].seq, " is not open"));
      continue;
    }
    if (!seen.insert(slices[i].seq).second) {
      out[i] = absl::InvalidArgumentError(absl::StrCat("sequence ", slices[i].seq, " prefilled twice in one pass"));
      continue;
    }
    out[i] = pending;
    const int64_t n = std::min(pending, slices[i].max_tokens);
    if (n <= 0) continue;
    const SeqState& s = seqs_[slices[i].seq];
    Engine::Feed f;
    f.seq = slices[i].seq;
    const auto from = s.committed.begin() + static_cast<int64_t>(s.fed.size());
    f.tokens.assign(from, from + n);
    f.n_logits = 0;
    feeds.push_back(std::move(f));
    fed_slice.push_back(i);
  }
  if (feeds.empty()) return out;
  std::vector<float> none;
  if (absl::Status st = engine_->Run(feeds, &none); !st.ok()) {
    for (size_t i : fed_slice) out[i] = st;
    return out;
  }
  for (size_t j = 0; j < feeds.size(); ++j) {
    SeqState& s = seqs_[feeds[j].seq];
    s.fed.insert(s.fed.end(), feeds[j].tokens.begin(), feeds[j].tokens.end());
    out[fed_slice[j]] = PrefillPending(feeds[j].seq);
  }
  return out;
}

absl::Status SeqCore::Reconcile(int32_t seq, SeqState& s) {
  size_t p = 0;
  const size_t lim = std::min(s.fed.size(), s.committed.empty() ? 0 : s.committed.size() - 1);
  while (p < lim && s.fed[p] == s.committed[p]) ++p;
  if (p < s.fed.size()) {
    SPECD_RETURN_IF_ERROR(engine_->Truncate(seq, static_cast<int64_t>(p)));
    s.fed.resize(p);
  }
  return absl::OkStatus();
}

absl::Status SeqCore::Sync(int32_t seq, int64_t base_len, const std::vector<int32_t>& tokens) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("sequence ", seq, " is not open"));
  SeqState& s = it->second;
  if (base_len < 1 || base_len > static_cast<int64_t>(s.committed.size()))
    return absl::OutOfRangeError(absl::StrCat("sync base ", base_len, " outside the committed length ",
                                              s.committed.size(), " of sequence ", seq));
  if (base_len + static_cast<int64_t>(tokens.size()) >= engine_->options().max_seq_len)
    return absl::OutOfRangeError(absl::StrCat("sequence ", seq, " would exceed max-seq-len"));
  for (int32_t t : tokens) {
    if (t < 0 || t >= engine_->vocab_size()) return absl::InvalidArgumentError(absl::StrCat("token id ", t, " out of range"));
  }
  s.committed.resize(base_len);
  s.committed.insert(s.committed.end(), tokens.begin(), tokens.end());
  return Reconcile(seq, s);
}

void SeqCore::Release(int32_t seq) {
  if (seqs_.erase(seq)) engine_->Release(seq);
}

const SeqState* SeqCore::Get(int32_t seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? nullptr : &it->second;
}

int64_t SeqCore::CommittedLength(int32_t seq) const {
  const SeqState* s = Get(seq);
  return s ? static_cast<int64_t>(s->committed.size()) : -1;
}

std::vector<int32_t> SeqCore::Sequences() const {
  std::vector<int32_t> out;
  for (const auto& [id, s] : seqs_) out.push_back(id);
  return out;
}

namespace {

bool Penalized(const SamplingParams& p) { return p.repetition_penalty != 1.0f && p.repetition_window > 0; }

// The committed tokens the repetition penalty looks at (none without a penalty).
std::vector<int32_t> PenaltyWindow(const SamplingParams& p, const std::vector<int32_t>& committed) {
  if (!Penalized(p)) return {};
  const size_t n = std::min(committed.size(), static_cast<size_t>(p.repetition_window));
  return std::vector<int32_t>(committed.end() - static_cast<int64_t>(n), committed.end());
}

}  // namespace

absl::Status DraftCore::EnsureResults(size_t n) {
  if (n <= cap_) return absl::OkStatus();
  // Once, for the most any batch can hold: backend buffers live as long as the backend.
  const size_t cap = std::max(n, static_cast<size_t>(engine_->options().max_seqs) * kMaxDraftTokens);
  SPECD_ASSIGN_OR_RETURN(void* buf, engine_->backend()->AllocBuffer(cap * (sizeof(int32_t) + sizeof(float))));
  tokens_dev_ = static_cast<int32_t*>(buf);
  conf_dev_ = reinterpret_cast<float*>(tokens_dev_ + cap);
  cap_ = cap;
  return absl::OkStatus();
}

std::vector<DraftResult> DraftCore::Propose(const std::vector<DraftJob>& jobs, CoreTimes* times) {
  const int V = engine_->vocab_size();
  const int64_t max_len = engine_->options().max_seq_len;
  std::vector<DraftResult> out(jobs.size());
  std::vector<size_t> active;
  int kmax = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    out[i].seq = jobs[i].seq;
    auto it = seqs_.find(jobs[i].seq);
    if (it == seqs_.end()) {
      out[i].status = absl::NotFoundError(absl::StrCat("sequence ", jobs[i].seq, " is not open"));
    } else if (jobs[i].k < 0 || jobs[i].k > kMaxDraftTokens) {
      out[i].status = absl::InvalidArgumentError(absl::StrCat("bad proposal length ", jobs[i].k));
    } else if (static_cast<int64_t>(it->second.committed.size()) + jobs[i].k >= max_len) {
      out[i].status = absl::OutOfRangeError(absl::StrCat("sequence ", jobs[i].seq, " would exceed max-seq-len"));
    } else if (jobs[i].k > 0) {
      active.push_back(i);
      kmax = std::max(kmax, jobs[i].k);
    }
  }
  if (active.empty()) return out;
  if (absl::Status st = EnsureResults(jobs.size() * static_cast<size_t>(kmax)); !st.ok()) {
    for (size_t i : active) out[i].status = st;
    return out;
  }
  Backend* be = engine_->backend();
  // Results of job i, step t at [i * kmax + t]; nothing waits for them until the end.
  auto at = [&](size_t i, int t) { return i * static_cast<size_t>(kmax) + static_cast<size_t>(t); };
  const bool host = be->HostMemory();
  std::vector<int> steps(jobs.size(), 0);  // steps job i took part in
  std::vector<size_t> running = active;
  std::vector<Engine::Feed> feeds;
  std::vector<SampleRow> rows;
  absl::Status enqueue_error;
  std::vector<int64_t> caught_up(jobs.size(), 0);  // step 0's feed: committed tokens not yet in the KV
  for (int step = 0; !running.empty(); ++step) {
    feeds.clear();
    for (size_t i : running) {
      const SeqState& s = seqs_[jobs[i].seq];
      Engine::Feed f;
      f.seq = jobs[i].seq;
      if (step == 0) {
        f.tokens.assign(s.committed.begin() + static_cast<int64_t>(s.fed.size()), s.committed.end());
        caught_up[i] = static_cast<int64_t>(f.tokens.size());
      } else {
        f.tokens.push_back(0);  // placeholder: the token the last step sampled, read where it is
        f.fed.push_back(tokens_dev_ + at(i, step - 1));
      }
      f.n_logits = 1;
      feeds.push_back(std::move(f));
    }
    absl::Status st = engine_->Enqueue(feeds, [&](const float* logits, const std::vector<Engine::PassRows>& pass) {
      rows.clear();
      for (const Engine::PassRows& r : pass) {
        const size_t i = running[r.feed];
        const DraftJob& j = jobs[i];
        const SeqState& s = seqs_[j.seq];
        SampleRow row;
        row.row = r.row0;
        row.params = s.sampling;
        row.stream = kRngDraft;
        row.counter = s.committed.size() + static_cast<uint64_t>(step);
        row.recent = PenaltyWindow(s.sampling, s.committed);
        if (Penalized(s.sampling)) {
          row.recent_dev = tokens_dev_ + at(i, 0);
          row.n_recent_dev = step;
        }
        row.token = tokens_dev_ + at(i, step);
        if (j.want_confidence || j.min_confidence > 0) row.confidence = conf_dev_ + at(i, step);
        if (j.q) row.probs = j.q + static_cast<size_t>(step) * static_cast<size_t>(V);
        rows.push_back(std::move(row));
      }
      be->Sample(logits, V, rows);
    });
    if (!st.ok()) {
      enqueue_error = st;  // the steps before stay valid
      break;
    }
    std::vector<size_t> next;
    for (size_t i : running) {
      ++steps[i];
      const DraftJob& j = jobs[i];
      if (steps[i] >= j.k) continue;
      // Host results are there already: stop before an unsure token now
      // (its forward is spent; the next one is not).
      if (host && step > 0 && j.min_confidence > 0 && conf_dev_[at(i, step)] < j.min_confidence) continue;
      next.push_back(i);
    }
    running.swap(next);
  }
  // One wait for everything: the tokens and confidences of every step.
  results_host_.resize(2 * cap_);
  Engine::Timing timing;
  const absl::Status st = engine_->Read(tokens_dev_, results_host_.data(), results_host_.size() * sizeof(int32_t), &timing);
  const int32_t* tokens_host = results_host_.data();
  const float* conf_host = reinterpret_cast<const float*>(results_host_.data() + cap_);
  if (times) *times = CoreTimes{timing.forward + timing.after, 0.0, timing.cold};
  for (size_t i : active) {
    SeqState& s = seqs_[jobs[i].seq];
    DraftResult& r = out[i];
    const DraftJob& j = jobs[i];
    r.forwards = steps[i];
    if (!st.ok()) {  // a device error: the step's KV is unusable
      (void)engine_->Truncate(j.seq, static_cast<int64_t>(s.fed.size()));
      r.status = st;
      continue;
    }
    if (steps[i] == 0) {
      r.status = enqueue_error;
      continue;
    }
    // The KV now holds the caught-up tokens and every token fed after it
    // (those after a cut too: the next Sync drops them).
    s.fed.insert(s.fed.end(), s.committed.begin() + static_cast<int64_t>(s.fed.size()),
                 s.committed.begin() + static_cast<int64_t>(s.fed.size()) + caught_up[i]);
    for (int t = 0; t + 1 < steps[i]; ++t) s.fed.push_back(tokens_host[at(i, t)]);
    const bool want_conf = j.want_confidence || j.min_confidence > 0;
    for (int t = 0; t < steps[i]; ++t) {
      if (t > 0 && j.min_confidence > 0 && conf_host[at(i, t)] < j.min_confidence) break;  // not sure: stop before it
      r.tokens.push_back(tokens_host[at(i, t)]);
      if (want_conf) r.confidence.push_back(conf_host[at(i, t)]);
    }
    // Tokens out of range would mean a broken device result: never pass them on.
    for (int32_t x : r.tokens) {
      if (x < 0 || x >= V) {
        r.tokens.clear();
        r.confidence.clear();
        r.status = absl::InternalError(absl::StrCat("the draft's sampler returned token ", x));
        break;
      }
    }
  }
  return out;
}

std::vector<VerifyResult> TargetCore::Verify(const std::vector<VerifyRequest>& reqs, CoreTimes* times) {
  const int V = engine_->vocab_size();
  const int64_t max_len = engine_->options().max_seq_len;
  std::vector<VerifyResult> out(reqs.size());
  std::vector<size_t> ok;
  std::vector<Engine::Feed> feeds;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const VerifyRequest& r = reqs[i];
    out[i].seq = r.seq;
    out[i].n_proposed = static_cast<int>(r.proposals.size());
    auto it = seqs_.find(r.seq);
    if (it == seqs_.end()) {
      out[i].status = absl::NotFoundError(absl::StrCat("sequence ", r.seq, " is not open"));
      continue;
    }
    const SeqState& s = it->second;
    const int k = static_cast<int>(r.proposals.size());
    if (k + 1 > engine_->options().max_out_rows) {
      out[i].status = absl::InvalidArgumentError(absl::StrCat(k, " proposals exceed the verify limit of ",
                                                              engine_->options().max_out_rows - 1));
      continue;
    }
    if (static_cast<int64_t>(s.committed.size()) + k + 1 > max_len) {
      out[i].status = absl::OutOfRangeError(absl::StrCat("sequence ", r.seq, " reached max-seq-len ", max_len));
      continue;
    }
    bool bad = false;
    for (int32_t t : r.proposals) bad |= (t < 0 || t >= V);
    if (bad) {
      out[i].status = absl::InvalidArgumentError("proposed token id out of range");
      continue;
    }
    Engine::Feed f;
    f.seq = r.seq;
    f.tokens.assign(s.committed.begin() + static_cast<int64_t>(s.fed.size()), s.committed.end());
    f.tokens.insert(f.tokens.end(), r.proposals.begin(), r.proposals.end());
    f.n_logits = k + 1;
    feeds.push_back(std::move(f));
    ok.push_back(i);
  }
  if (ok.empty()) return out;
  constexpr size_t kWords = 4;  // {n_accepted, next_token, bonus, unused}
  if (ok.size() * kWords > cap_) {
    const size_t cap = std::max(ok.size(), static_cast<size_t>(engine_->options().max_seqs)) * kWords;
    auto buf = engine_->backend()->AllocBuffer(cap * sizeof(int32_t));
    if (!buf.ok()) {
      for (size_t i : ok) out[i].status = buf.status();
      return out;
    }
    results_dev_ = static_cast<int32_t*>(*buf);
    cap_ = cap;
  }
  Backend* be = engine_->backend();
  // Logprobs are of the raw logits: the rows of the sequences that ask for
  // them come to the host (a wait in the pass; only then).
  std::vector<size_t> logprob_at(ok.size(), 0);
  size_t logprob_floats = 0;
  for (size_t j = 0; j < ok.size(); ++j) {
    if (seqs_[reqs[ok[j]].seq].sampling.logprobs < 0) continue;
    logprob_at[j] = logprob_floats;
    logprob_floats += static_cast<size_t>(feeds[j].n_logits) * static_cast<size_t>(V);
  }
  logprob_rows_.resize(logprob_floats);
  absl::Status copied;
  std::vector<AcceptRows> accepts;
  absl::Status st = engine_->Enqueue(
      feeds,
      [&](const float* logits, const std::vector<Engine::PassRows>& pass) {
        for (const Engine::PassRows& p : pass) {
          if (!copied.ok() || seqs_[reqs[ok[p.feed]].seq].sampling.logprobs < 0) continue;
          copied = be->ReadToHost(logits + static_cast<size_t>(p.row0) * V, logprob_rows_.data() + logprob_at[p.feed],
                                  static_cast<size_t>(feeds[p.feed].n_logits) * V);
        }
        accepts.clear();
        for (const Engine::PassRows& p : pass) {
          const VerifyRequest& r = reqs[ok[p.feed]];
          const SeqState& s = seqs_[r.seq];
          AcceptRows a;
          a.row0 = p.row0;
          a.k = static_cast<int>(r.proposals.size());
          a.params = s.sampling;
          a.pos0 = static_cast<int64_t>(s.committed.size());
          a.recent = PenaltyWindow(s.sampling, s.committed);
          a.proposals = r.proposals;
          a.q = r.q;
          a.out = results_dev_ + p.feed * kWords;
          accepts.push_back(std::move(a));
        }
        be->Accept(logits, V, accepts);
      },
      /*split_timing=*/true);
  if (!st.ok()) {
    for (size_t i : ok) out[i].status = st;
    return out;
  }
  results_host_.resize(ok.size() * kWords);
  Engine::Timing timing;
  st = engine_->Read(results_dev_, results_host_.data(), results_host_.size() * sizeof(int32_t), &timing);
  if (st.ok()) st = copied;
  if (times) *times = CoreTimes{timing.forward, timing.after, timing.cold};
  for (size_t j = 0; j < ok.size(); ++j) {
    const size_t i = ok[j];
    const VerifyRequest& r = reqs[i];
    SeqState& s = seqs_[r.seq];
    const int k = static_cast<int>(r.proposals.size());
    s.fed.insert(s.fed.end(), feeds[j].tokens.begin(), feeds[j].tokens.end());
    absl::Status why = st;
    const int32_t* res = results_host_.data() + j * kWords;
    if (why.ok() && (res[0] < 0 || res[0] > k || res[1] < 0 || res[1] >= V))
      why = absl::InternalError(absl::StrCat("the acceptance returned accepted ", res[0], ", token ", res[1], " for k ", k));
    if (why.ok() && r.still_valid) why = r.still_valid();
    if (!why.ok()) {  // nothing committed: drop the step's KV again
      const absl::Status rs = Reconcile(r.seq, s);
      out[i].status = rs.ok() ? why : rs;
      continue;
    }
    out[i].n_accepted = res[0];
    out[i].appended.assign(r.proposals.begin(), r.proposals.begin() + res[0]);
    out[i].appended.push_back(res[1]);
    if (s.sampling.logprobs >= 0) {  // row t scored the token at position pos0 + t
      const float* rows = logprob_rows_.data() + logprob_at[j];
      for (size_t t = 0; t < out[i].appended.size(); ++t)
        out[i].logprobs.push_back(LogprobOf(rows + t * static_cast<size_t>(V), V, out[i].appended[t], s.sampling.logprobs));
    }
    s.committed.insert(s.committed.end(), out[i].appended.begin(), out[i].appended.end());
    out[i].status = Reconcile(r.seq, s);
  }
  return out;
}

}  // namespace specd
