#include "common/spec/acceptance.h"

namespace specd {

AcceptResult VerifyProposals(const std::vector<TokenDist>& p, const float* q_dense, const int32_t* proposals,
                             int k, int vocab, uint64_t seed, int64_t pos0) {
  AcceptResult r;
  for (int i = 0; i < k; ++i) {
    const int32_t x = proposals[i];
    const float* q = q_dense ? q_dense + static_cast<size_t>(i) * vocab : nullptr;
    auto q_of = [&](int32_t id) { return q ? q[id] : OneHot(x, id); };
    const float px = p[i].Prob(x);
    const float qx = (x >= 0 && x < vocab) ? q_of(x) : 0.0f;
    const uint64_t ctr = static_cast<uint64_t>(pos0 + i);
    if (AcceptProposal(px, qx, Uniform01(seed, kRngAccept, ctr))) {
      ++r.n_accepted;
      continue;
    }
    // Rejected: draw from the residual over p_i's support (zero elsewhere).
    thread_local TokenDist res;  // reused: no allocation per step once warm
    res.ids.clear();
    res.probs.clear();
    double total = 0;
    for (size_t j = 0; j < p[i].ids.size(); ++j) {
      const int32_t id = p[i].ids[j];
      const float w = ResidualWeight(p[i].probs[j], q_of(id));
      if (w > 0) {
        res.ids.push_back(id);
        res.probs.push_back(w);
        total += w;
      }
    }
    // p == q leaves no residual; then rejection has probability 0 in exact
    // arithmetic and p itself is the right distribution.
    const TokenDist& from = total > 0 ? res : p[i];
    r.next_token = SampleDist(from, Uniform01(seed, kRngResidual, ctr));
    return r;
  }
  r.bonus = true;
  r.next_token = SampleDist(p[k], Uniform01(seed, kRngResidual, static_cast<uint64_t>(pos0 + k)));
  return r;
}

}  // namespace specd
