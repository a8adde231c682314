#include "common/backend/host_sample.h"

#include <cstring>

#include "common/sampler/rng.h"
#include "common/sampler/sampler.h"
#include "common/spec/acceptance.h"

namespace specd {

void SampleOnHost(const float* logits, int vocab, const std::vector<SampleRow>& rows) {
  thread_local TokenDist dist;
  thread_local std::vector<int32_t> recent;
  for (const SampleRow& r : rows) {
    const float* row = logits + static_cast<size_t>(r.row) * vocab;
    recent.assign(r.recent.begin(), r.recent.end());
    if (r.n_recent_dev > 0) recent.insert(recent.end(), r.recent_dev, r.recent_dev + r.n_recent_dev);
    ProcessLogits(row, vocab, r.params, recent, &dist);
    if (r.token) {
      *r.token = r.params.greedy() ? dist.ids[0]
                                   : SampleDist(dist, Uniform01(r.params.seed, r.stream, r.counter));
    }
    if (r.confidence) *r.confidence = Confidence(row, vocab, r.params, recent, dist);
    if (r.probs) {
      std::memset(r.probs, 0, sizeof(float) * static_cast<size_t>(vocab));
      for (size_t j = 0; j < dist.ids.size(); ++j) r.probs[dist.ids[j]] = dist.probs[j];
    }
  }
}

void AcceptOnHost(const float* logits, int vocab, const std::vector<AcceptRows>& seqs) {
  thread_local std::vector<TokenDist> p;
  thread_local std::vector<int32_t> recent;
  for (const AcceptRows& s : seqs) {
    p.resize(static_cast<size_t>(s.k) + 1);
    recent.assign(s.recent.begin(), s.recent.end());
    for (int t = 0; t <= s.k; ++t) {
      ProcessLogits(logits + static_cast<size_t>(s.row0 + t) * vocab, vocab, s.params, recent, &p[t]);
      if (t < s.k) recent.push_back(s.proposals[t]);
    }
    const AcceptResult r = VerifyProposals(p, s.q, s.proposals.data(), s.k, vocab, s.params.seed, s.pos0);
    s.out[0] = r.n_accepted;
    s.out[1] = r.next_token;
    s.out[2] = r.bonus ? 1 : 0;
  }
}

}  // namespace specd
