// Sampler, RNG and the speculative acceptance rule.
#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include "common/sampler/rng.h"
#include "common/sampler/sampler.h"
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
