#include "common/engine/spec_core.h"

#include <chrono>
#include <algorithm>
#include <cmath>
#include <cstring>
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
float TopProb(const TokenDist& d) {
  float m = 0;
  for (float p : d.probs) m = std::max(m, p);
  return m;
}
// The model's own top probability (softmax at temperature 1): greedy
// decoding's processed distribution is one-hot and says nothing about it.
float SoftmaxTop(const float* logits, int n) {
  float mx = logits[0];
  for (int i = 1; i < n; ++i) mx = std::max(mx, logits[i]);
  double z = 0;
  for (int i = 0; i < n; ++i) z += std::exp(static_cast<double>(logits[i] - mx));
  return z > 0 ? static_cast<float>(1.0 / z) : 0.0f;
}
}  // namespace

std::vector<DraftResult> DraftCore::Propose(const std::vector<DraftJob>& reqs, const std::vector<float*>& q_out,
                                            CoreTimes* times) {
  const double fwd0 = engine_->counters().forward_seconds;
  const int V = engine_->vocab_size();
  const int64_t max_len = engine_->options().max_seq_len;
  std::vector<DraftResult> out(reqs.size());
  std::vector<size_t> active;
  for (size_t i = 0; i < reqs.size(); ++i) {
    out[i].seq = reqs[i].seq;
    auto it = seqs_.find(reqs[i].seq);
    if (it == seqs_.end()) {
      out[i].status = absl::NotFoundError(absl::StrCat("sequence ", reqs[i].seq, " is not open"));
    } else if (reqs[i].k < 0 || (reqs[i].k > 0 && q_out[i] == nullptr)) {
      out[i].status = absl::InvalidArgumentError("bad proposal length or buffer");
    } else if (static_cast<int64_t>(it->second.committed.size()) + reqs[i].k >= max_len) {
      out[i].status = absl::OutOfRangeError(absl::StrCat("sequence ", reqs[i].seq, " would exceed max-seq-len"));
    } else if (reqs[i].k > 0) {
      active.push_back(i);
    }
  }
  std::vector<float> logits;
  TokenDist dist;
  std::vector<int32_t> recent;
  for (int step = 0; !active.empty(); ++step) {
    std::vector<Engine::Feed> feeds;
    for (size_t i : active) {
      SeqState& s = seqs_[reqs[i].seq];
      Engine::Feed f;
      f.seq = reqs[i].seq;
      if (step == 0) f.tokens.assign(s.committed.begin() + static_cast<int64_t>(s.fed.size()), s.committed.end());
      else f.tokens.push_back(out[i].tokens.back());
      f.n_logits = 1;
      feeds.push_back(std::move(f));
    }
    logits.clear();
    absl::Status st = engine_->Run(feeds, &logits);
    if (!st.ok()) {
      // The proposals made so far stay valid; a failed step just ends them.
      for (size_t i : active) {
        if (out[i].tokens.empty()) out[i].status = st;
      }
      break;
    }
    std::vector<size_t> next;
    for (size_t j = 0; j < active.size(); ++j) {
      const size_t i = active[j];
      SeqState& s = seqs_[reqs[i].seq];
      s.fed.insert(s.fed.end(), feeds[j].tokens.begin(), feeds[j].tokens.end());
      recent.assign(s.committed.begin(), s.committed.end());
      recent.insert(recent.end(), out[i].tokens.begin(), out[i].tokens.end());
      const float* row = logits.data() + j * static_cast<size_t>(V);
      ProcessLogits(row, V, s.sampling, recent, &dist);
      const float conf = s.sampling.greedy() ? SoftmaxTop(row, V) : TopProb(dist);
      if (step > 0 && conf < reqs[i].min_confidence) continue;  // not confident: stop before this token
      float* q = q_out[i] + static_cast<size_t>(step) * V;
      std::memset(q, 0, sizeof(float) * V);
      for (size_t t = 0; t < dist.ids.size(); ++t) q[dist.ids[t]] = dist.probs[t];
      const uint64_t pos = s.committed.size() + static_cast<uint64_t>(step);
      const int32_t x = s.sampling.greedy() ? dist.ids[0] : SampleDist(dist, Uniform01(s.sampling.seed, kRngDraft, pos));
      out[i].tokens.push_back(x);
      out[i].confidence.push_back(conf);
      if (static_cast<int>(out[i].tokens.size()) < reqs[i].k) next.push_back(i);
    }
    for (size_t i : active) ++out[i].forwards;
    active.swap(next);
  }
  if (times) times->forward = engine_->counters().forward_seconds - fwd0;
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
    if (k > 0 && r.q == nullptr && !r.accept) {
      out[i].status = absl::InvalidArgumentError("proposals without draft probabilities");
      continue;
    }
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
  std::vector<float> logits;
  const double fwd0 = engine_->counters().forward_seconds;
  absl::Status st = engine_->Run(feeds, &logits);
  if (!st.ok()) {
    for (size_t i : ok) out[i].status = st;
    return out;
  }
  const auto ta = std::chrono::steady_clock::now();
  size_t row = 0;
  std::vector<TokenDist> p;
  std::vector<int32_t> recent;
  for (size_t j = 0; j < ok.size(); ++j) {
    const size_t i = ok[j];
    const VerifyRequest& r = reqs[i];
    SeqState& s = seqs_[r.seq];
    const int k = static_cast<int>(r.proposals.size());
    p.assign(k + 1, TokenDist{});
    recent.assign(s.committed.begin(), s.committed.end());
    for (int t = 0; t <= k; ++t) {
      ProcessLogits(logits.data() + (row + t) * static_cast<size_t>(V), V, s.sampling, recent, &p[t]);
      if (t < k) recent.push_back(r.proposals[t]);
    }
    row += static_cast<size_t>(k) + 1;
    const int64_t pos0 = static_cast<int64_t>(s.committed.size());
    absl::StatusOr<AcceptResult> accepted =
        k > 0 && r.accept ? r.accept(p, s.sampling.seed, pos0)
                          : VerifyProposals(p, r.q, r.proposals.data(), k, V, s.sampling.seed, pos0);
    s.fed.insert(s.fed.end(), feeds[j].tokens.begin(), feeds[j].tokens.end());
    if (!accepted.ok()) {  // nothing committed: drop the step's KV again
      const absl::Status rs = Reconcile(r.seq, s);
      out[i].status = rs.ok() ? accepted.status() : rs;
      continue;
    }
    const AcceptResult& ar = *accepted;
    out[i].n_accepted = ar.n_accepted;
    out[i].appended.assign(r.proposals.begin(), r.proposals.begin() + ar.n_accepted);
    out[i].appended.push_back(ar.next_token);
    s.committed.insert(s.committed.end(), out[i].appended.begin(), out[i].appended.end());
    out[i].status = Reconcile(r.seq, s);
  }
  if (times) {
    times->forward = engine_->counters().forward_seconds - fwd0;
    times->accept = std::chrono::duration<double>(std::chrono::steady_clock::now() - ta).count();
  }
  return out;
}

}  // namespace specd
