// Sampler, RNG and the speculative acceptance rule.
#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include "common/sampler/rng.h"
#include "common/sampler/sampler.h"
#include "common/sampler/select.h"
#include "common/spec/acceptance.h"
#include "gtest/gtest.h"

namespace specd {
namespace {

TEST(SamplerTest, GreedyIsArgmaxWithLowestIdOnTies) {
  const float l[] = {0.5f, 2.0f, -1.0f, 2.0f, NAN};
  TokenDist d;
  ProcessLogits(l, 5, SamplingParams{}, {}, &d);
  ASSERT_EQ(d.ids.size(), 1u);
  EXPECT_EQ(d.ids[0], 1);
  EXPECT_EQ(d.probs[0], 1.0f);
  EXPECT_EQ(Argmax(l, 5), 1);
}

// Greedy confidence is the temperature-1 softmax's top probability; a NaN
// logit counts as -inf there as everywhere in the sampler (it once made the
// sum NaN and the confidence 0).
TEST(SamplerTest, GreedyConfidenceIgnoresNaNAndInfiniteMinus) {
  const std::vector<float> l = {1.0f, NAN, 3.0f, -INFINITY, 2.0f};
  SamplingParams p;  // greedy
  TokenDist d;
  ProcessLogits(l.data(), static_cast<int>(l.size()), p, {}, &d);
  ASSERT_EQ(d.ids[0], 2);
  const double z = std::exp(1.0 - 3.0) + 1.0 + std::exp(2.0 - 3.0);
  EXPECT_NEAR(Confidence(l.data(), static_cast<int>(l.size()), p, {}, d), 1.0 / z, 1e-6);
}

// With a repetition penalty the greedy token comes from the penalized row,
// and so does its confidence (the CUDA sampler penalizes the row in place
// and gives the same figure; gpu_check --spec compares them).
TEST(SamplerTest, GreedyConfidenceIsThePenalizedRowsSoftmax) {
  const std::vector<float> l = {1.0f, 4.0f, 3.0f, -2.0f};
  SamplingParams p;  // greedy
  p.repetition_penalty = 2.0f;
  p.repetition_window = 8;
  const std::vector<int32_t> recent = {1, 3, 1};  // token 1 penalized once: 4 -> 2; token 3: -2 -> -4
  TokenDist d;
  ProcessLogits(l.data(), 4, p, recent, &d);
  ASSERT_EQ(d.ids[0], 2);
  const double z = std::exp(1.0 - 3.0) + std::exp(2.0 - 3.0) + 1.0 + std::exp(-4.0 - 3.0);
  EXPECT_NEAR(Confidence(l.data(), 4, p, recent, d), 1.0 / z, 1e-6);
}

TEST(SamplerTest, TemperatureSoftmaxMatchesFloat64) {
  std::vector<float> l = {1.0f, 2.0f, 0.5f, -3.0f, 4.0f};
  SamplingParams p;
  p.temperature = 0.7f;
  TokenDist d;
  ProcessLogits(l.data(), 5, p, {}, &d);
  ASSERT_EQ(d.ids.size(), 5u);
  double z = 0;
  for (float x : l) z += std::exp(x / 0.7);
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(d.Prob(i), std::exp(l[i] / 0.7) / z, 1e-6);
}

TEST(SamplerTest, TopKTopPMinPFilterAndRenormalize) {
  // Probabilities at T=1 of logits log([.4,.3,.2,.06,.04]).
  std::vector<float> l;
  for (double pr : {0.4, 0.3, 0.2, 0.06, 0.04}) l.push_back(static_cast<float>(std::log(pr)));
  TokenDist d;
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 2;
  ProcessLogits(l.data(), 5, p, {}, &d);
  ASSERT_EQ(d.ids, (std::vector<int32_t>{0, 1}));
  EXPECT_NEAR(d.probs[0], 0.4 / 0.7, 1e-6);
  p.top_k = 0;
  p.top_p = 0.85f;  // .4+.3 = .7 < .85 <= .9
  ProcessLogits(l.data(), 5, p, {}, &d);
  ASSERT_EQ(d.ids, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_NEAR(d.Prob(2), 0.2 / 0.9, 1e-6);
  p.top_p = 1.0f;
  p.min_p = 0.45f;  // keep p >= 0.18
  ProcessLogits(l.data(), 5, p, {}, &d);
  ASSERT_EQ(d.ids, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_NEAR(d.Prob(0) + d.Prob(1) + d.Prob(2), 1.0, 1e-6);
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  std::vector<float> l = {2.0f, -1.0f, 1.9f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  TokenDist d;
  const std::vector<int32_t> recent = {0, 1};
  ProcessLogits(l.data(), 3, p, recent, &d);
  EXPECT_EQ(d.ids[0], 2);  // 2.0 -> 1.0 falls below 1.9
  p.temperature = 1.0f;
  ProcessLogits(l.data(), 3, p, recent, &d);
  const double z = std::exp(1.0) + std::exp(-2.0) + std::exp(1.9);
  EXPECT_NEAR(d.Prob(1), std::exp(-2.0) / z, 1e-6);
}

// The sampler's rule written the plain way (a full sort in the sampler's
// order, float64 weights summed in that order): the reference for the
// selection without sorting.
TokenDist SortedReference(const std::vector<float>& logits, const SamplingParams& p) {
  const int V = static_cast<int>(logits.size());
  auto l = [&](int i) { return std::isnan(logits[i]) ? -INFINITY : logits[i]; };
  std::vector<int> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return l(a) > l(b); });
  if (p.top_k > 0 && p.top_k < V) ids.resize(p.top_k);
  const double top = l(ids[0]);
  std::vector<double> w;
  double sum = 0;
  for (int id : ids) {
    w.push_back(std::isfinite(l(id)) ? std::exp((l(id) - top) / static_cast<double>(p.temperature)) : 0.0);
    sum += w.back();
  }
  size_t n = ids.size();
  if (p.top_p < 1.0f) {
    double acc = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      acc += w[i] / sum;
      if (acc >= p.top_p) {
        n = i + 1;
        break;
      }
    }
  }
  std::map<int, double> kept;
  double total = 0;
  for (size_t i = 0; i < n; ++i) {
    if (w[i] >= p.min_p && w[i] > 0) {
      kept[ids[i]] = w[i];
      total += w[i];
    }
  }
  TokenDist d;
  for (const auto& [id, wi] : kept) {
    d.ids.push_back(id);
    d.probs.push_back(static_cast<float>(wi / total));
  }
  return d;
}

TEST(SamplerTest, SelectionWithoutSortingMatchesAFullSort) {
  std::mt19937 rng(11);
  std::normal_distribution<float> gauss(0.0f, 3.0f);
  int compared = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const int V = 500 + static_cast<int>(rng() % 3000);
    std::vector<float> l(V);
    for (float& x : l) x = gauss(rng);
    // Ties (the same logit at many ids), -inf, NaN and -0/+0.
    for (int i = 0; i < V / 10; ++i) l[rng() % V] = 1.5f;
    for (int i = 0; i < V / 50; ++i) l[rng() % V] = -INFINITY;
    if (trial % 3 == 0) l[rng() % V] = NAN;
    if (trial % 4 == 0) {
      l[rng() % V] = 0.0f;
      l[rng() % V] = -0.0f;
    }
    if (trial % 5 == 0) l[rng() % V] = 9.0f;  // one peak
    for (int top_k : {0, 1, 3, 40, V - 1}) {
      for (float top_p : {1.0f, 0.3f, 0.9f, 0.999f}) {
        for (float min_p : {0.0f, 0.05f}) {
          SamplingParams p;
          p.temperature = trial % 2 ? 0.7f : 1.6f;
          p.top_k = top_k;
          p.top_p = top_p;
          p.min_p = min_p;
          TokenDist got;
          ProcessLogits(l.data(), V, p, {}, &got);
          const TokenDist want = SortedReference(l, p);
          ASSERT_EQ(got.ids, want.ids) << "V=" << V << " k=" << top_k << " p=" << top_p << " min_p=" << min_p;
          for (size_t i = 0; i < got.probs.size(); ++i) ASSERT_NEAR(got.probs[i], want.probs[i], 1e-6);
          ++compared;
        }
      }
    }
  }
  EXPECT_EQ(compared, 24 * 5 * 4 * 2);
}

TEST(SamplerTest, RadixSelectFindsTheThresholdAmongTies) {
  // 1000 keys, the logit 2.0 at every 3rd id, 1.0 elsewhere: the 5 first in
  // the sampler's order are the 5 lowest ids holding 2.0.
  std::vector<uint64_t> keys;
  for (int i = 0; i < 1000; ++i) keys.push_back(OrderKey(i % 3 == 0 ? 2.0f : 1.0f, i));
  RadixSelect s = RadixSelect::Start();
  while (!s.done()) {
    double w[kSelectBuckets] = {};
    uint32_t c[kSelectBuckets] = {};
    for (uint64_t k : keys) {
      if (s.Matches(k)) {
        w[s.Digit(k)] += 1;
        ++c[s.Digit(k)];
      }
    }
    s.Advance(w, c, 5, /*counting=*/true);
  }
  std::vector<int> in;
  for (int i = 0; i < 1000; ++i) {
    if (keys[i] <= s.threshold) in.push_back(i);
  }
  EXPECT_EQ(in, (std::vector<int>{0, 3, 6, 9, 12}));
  // NaN sorts as -inf, -0 as +0, and a higher logit first.
  EXPECT_EQ(OrderBits(NAN), OrderBits(-INFINITY));
  EXPECT_EQ(OrderBits(-0.0f), OrderBits(0.0f));
  EXPECT_LT(OrderKey(3.0f, 7), OrderKey(2.0f, 1));
  EXPECT_LT(OrderKey(2.0f, 1), OrderKey(2.0f, 2));
}

TEST(SamplerTest, ValidateRejectsBadParams) {
  SamplingParams p;
  p.top_p = 0.0f;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.temperature = NAN;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.min_p = 1.0f;
  EXPECT_FALSE(p.Validate().ok());
  p = {};
  p.top_k = -1;
  EXPECT_FALSE(p.Validate().ok());
  EXPECT_TRUE(SamplingParams{}.Validate().ok());
}

TEST(RngTest, UniformIsDeterministicAndSpread) {
  EXPECT_EQ(Uniform01(1, kRngDraft, 5), Uniform01(1, kRngDraft, 5));
  EXPECT_NE(Uniform01(1, kRngDraft, 5), Uniform01(1, kRngAccept, 5));
  EXPECT_NE(Uniform01(1, kRngDraft, 5), Uniform01(2, kRngDraft, 5));
  double sum = 0;
  int bins[10] = {};
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = Uniform01(42, kRngTarget, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    ++bins[static_cast<int>(u * 10)];
  }
  EXPECT_NEAR(sum / n, 0.5, 0.01);
  double chi2 = 0;
  for (int b : bins) chi2 += (b - n / 10.0) * (b - n / 10.0) / (n / 10.0);
  EXPECT_LT(chi2, 27.9);  // 9 dof, p = 0.001
}

TokenDist Dense(const std::vector<double>& p) {
  TokenDist d;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] > 0) {
      d.ids.push_back(static_cast<int32_t>(i));
      d.probs.push_back(static_cast<float>(p[i]));
    }
  }
  return d;
}

// The rule's defining property: whatever the draft's q, the first emitted
// token is distributed as the target's p. Chi-square over many trials.
TEST(AcceptanceTest, FirstTokenHasTargetDistribution) {
  const int V = 6;
  const std::vector<double> p = {0.30, 0.25, 0.20, 0.15, 0.10, 0.0};
  const std::vector<double> q = {0.05, 0.40, 0.05, 0.20, 0.10, 0.20};
  const std::vector<TokenDist> pd = {Dense(p), Dense(p)};
  std::vector<float> qd(q.begin(), q.end());
  const int n = 200000;
  std::vector<int> counts(V, 0);
  int accepted = 0;
  for (int t = 0; t < n; ++t) {
    const uint64_t seed = 1000 + t;
    // The draft samples x ~ q with its own stream, as DraftCore does.
    const int32_t x = SampleDist(Dense(q), Uniform01(seed, kRngDraft, 0));
    const AcceptResult r = VerifyProposals(pd, qd.data(), &x, 1, V, seed, 0);
    const int32_t first = r.n_accepted == 1 ? x : r.next_token;
    accepted += r.n_accepted;
    ++counts[first];
  }
  EXPECT_EQ(counts[5], 0);  // outside the target's support: never emitted
  double chi2 = 0;
  for (int i = 0; i < 5; ++i) chi2 += (counts[i] - n * p[i]) * (counts[i] - n * p[i]) / (n * p[i]);
  EXPECT_LT(chi2, 18.47) << "4 dof, p = 0.001";
  // Acceptance probability is sum_x min(p, q).
  double expect_acc = 0;
  for (int i = 0; i < V; ++i) expect_acc += std::min(p[i], q[i]);
  EXPECT_NEAR(static_cast<double>(accepted) / n, expect_acc, 0.005);
}

TEST(AcceptanceTest, OneHotRowsNeedNoDenseQ) {
  // q one-hot at each proposal (a greedy draft, a deterministic proposer):
  // null q decides exactly as the dense one-hot rows.
  const int V = 5;
  const std::vector<TokenDist> p = {Dense({0.1, 0.4, 0.2, 0.2, 0.1}), Dense({0.3, 0.1, 0.1, 0.4, 0.1}),
                                    Dense({0.2, 0.2, 0.2, 0.2, 0.2})};
  const int32_t x[] = {1, 3};
  std::vector<float> q(2 * V, 0.0f);
  q[1] = 1.0f;
  q[V + 3] = 1.0f;
  int rejected = 0;
  for (uint64_t seed = 1; seed <= 400; ++seed) {
    const AcceptResult dense = VerifyProposals(p, q.data(), x, 2, V, seed, 7);
    const AcceptResult onehot = VerifyProposals(p, nullptr, x, 2, V, seed, 7);
    ASSERT_EQ(dense.n_accepted, onehot.n_accepted) << seed;
    ASSERT_EQ(dense.next_token, onehot.next_token) << seed;
    ASSERT_EQ(dense.bonus, onehot.bonus) << seed;
    if (onehot.n_accepted == 0) {
      ++rejected;
      EXPECT_NE(onehot.next_token, 1) << "a rejected token is never the correction";
    }
  }
  EXPECT_GT(rejected, 100);  // p(x_1) = 0.4: rejected ~60% of the time
}

TEST(AcceptanceTest, GreedyIsExactMatch) {
  const int V = 4;
  const std::vector<TokenDist> p = {Dense({0, 1, 0, 0}), Dense({0, 0, 1, 0}), Dense({1, 0, 0, 0})};
  std::vector<float> q(2 * V, 0.0f);
  q[1] = 1.0f;          // draft step 1: token 1 (matches)
  q[V + 3] = 1.0f;      // draft step 2: token 3 (target wants 2)
  const int32_t x[] = {1, 3};
  const AcceptResult r = VerifyProposals(p, q.data(), x, 2, V, 0, 10);
  EXPECT_EQ(r.n_accepted, 1);
  EXPECT_EQ(r.next_token, 2);
  EXPECT_FALSE(r.bonus);
  q[V + 3] = 0.0f;
  q[V + 2] = 1.0f;
  const int32_t y[] = {1, 2};
  const AcceptResult r2 = VerifyProposals(p, q.data(), y, 2, V, 0, 10);
  EXPECT_EQ(r2.n_accepted, 2);
  EXPECT_TRUE(r2.bonus);
  EXPECT_EQ(r2.next_token, 0);
}

}  // namespace
}  // namespace specd
