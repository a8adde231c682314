// The speculative acceptance rule (Leviathan et al. 2023; Chen et al. 2023),
// one implementation for every backend.
//
// The draft proposed x_1..x_k, drawing x_i from its processed distribution q_i.
// The target's processed distributions p_1..p_{k+1} come from one batched
// forward. Proposal i is accepted with probability min(1, p_i(x_i)/q_i(x_i));
// at the first rejection the token is drawn from norm(max(0, p_i - q_i)) and
// the step ends; if all k are accepted a bonus token is drawn from p_{k+1}.
// The resulting sequence has exactly the target's distribution. With greedy
// sampling p and q are one-hot, so this reduces to "accept while the draft's
// token equals the target's argmax, then emit the target's argmax".
//
// The per-token primitives are SPECD_HD so a device kernel applies the same rule.
#pragma once
#include <cstdint>
#include <vector>

#include "common/sampler/rng.h"
#include "common/sampler/sampler.h"
#include "common/util/hd.h"

namespace specd {

// u uniform in [0, 1): accept iff u < p/q, written without a division.
SPECD_HD bool AcceptProposal(float p_x, float q_x, double u) {
  return u * static_cast<double>(q_x) < static_cast<double>(p_x);
}

// Unnormalized residual mass of a token after a rejection.
SPECD_HD float ResidualWeight(float p, float q) { return p > q ? p - q : 0.0f; }

// q_i(j) when q_i is one-hot at x_i.
SPECD_HD float OneHot(int32_t x, int32_t j) { return j == x ? 1.0f : 0.0f; }

struct AcceptResult {
  int n_accepted = 0;       // proposals kept (0..k)
  int32_t next_token = -1;  // correction (on rejection) or bonus (all accepted)
  bool bonus = false;       // next_token came from p_{k+1}
};

// Host form. p: k+1 target distributions; q_dense: k rows of `vocab` draft
// probabilities (the exchange buffer's layout), or null when each q_i is
// one-hot at x_i (a deterministic proposer, or a draft decoding greedily:
// then x_i is accepted with probability p_i(x_i) and a rejection draws from
// p_i without x_i); pos0: sequence position of the first proposal (random
// numbers are keyed by position, see rng.h).
AcceptResult VerifyProposals(const std::vector<TokenDist>& p, const float* q_dense, const int32_t* proposals,
                             int k, int vocab, uint64_t seed, int64_t pos0);

}  // namespace specd
