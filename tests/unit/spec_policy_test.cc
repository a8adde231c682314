// The adaptive speculation policy and its cost table, with synthetic costs
// and acceptance (no models).
#include <random>

#include "common/engine/spec_policy.h"
#include "gtest/gtest.h"

namespace specd {
namespace {

TEST(SpecCosts, InterpolatesAndExtrapolates) {
  SpecCosts c;
  EXPECT_FALSE(c.Verify(0).has_value());
  EXPECT_FALSE(c.Draft(1).has_value());
  c.ObserveVerify(2, 0.010);
  EXPECT_DOUBLE_EQ(*c.Verify(0), 0.010);  // one length seen: flat
  EXPECT_DOUBLE_EQ(*c.Verify(6), 0.010);
  c.ObserveDraft(2, 0.004);
  EXPECT_DOUBLE_EQ(*c.Draft(4), 0.008);  // one length seen: proportional to forwards
  c.ObserveVerify(4, 0.014);
  EXPECT_DOUBLE_EQ(*c.Verify(3), 0.012);  // between observations
  EXPECT_NEAR(*c.Verify(6), 0.018, 1e-12);  // along the slope from the nearest end
  EXPECT_NEAR(*c.Verify(0), 0.006, 1e-12);
  EXPECT_NEAR(*c.Verify(2.5), 0.011, 1e-12);  // fractional lengths
  EXPECT_EQ(c.VerifyCount(2), 1);
  EXPECT_EQ(c.VerifyCount(1), 0);
  // A falling slope is taken as flat: longer calls never get cheaper.
  SpecCosts f;
  f.ObserveVerify(1, 0.010);
  f.ObserveVerify(3, 0.008);
  EXPECT_DOUBLE_EQ(*f.Verify(8), 0.008);
  EXPECT_DOUBLE_EQ(*f.Verify(0), 0.010);
}

TEST(SpecCosts, AveragesThenFollowsTheLatestAndFreezes) {
  SpecCosts c(0.5);
  c.ObserveVerify(0, 1.0);
  c.ObserveVerify(0, 3.0);  // the first observations are averaged
  EXPECT_DOUBLE_EQ(*c.Verify(0), 2.0);
  c.ObserveVerify(0, 4.0);  // then an EWMA of weight 0.5
  EXPECT_DOUBLE_EQ(*c.Verify(0), 3.0);
  c.ObserveVerify(0, 1000.0);  // an outlier counts as 4x the estimate
  EXPECT_DOUBLE_EQ(*c.Verify(0), 7.5);
  c.Freeze();
  c.ObserveVerify(0, 100.0);
  c.ObserveVerify(5, 1.0);
  EXPECT_DOUBLE_EQ(*c.Verify(0), 7.5);
  EXPECT_EQ(c.VerifyCount(5), 0);
  c.ObserveVerify(-1, 1.0);  // out of range: ignored
  EXPECT_NE(c.ToString().find("verify[0]=7500.000ms"), std::string::npos) << c.ToString();
}

// Costs of a GPU-like backend: verify of k+1 barely dearer than one token, a
// draft step a tenth of a target step.
void GpuLike(SpecCosts* c) {
  for (int n = 0; n <= 8; ++n) c->ObserveVerify(n, 0.010 + 0.0005 * n);
  for (int f = 1; f <= 8; ++f) c->ObserveDraft(f, 0.001 * f);
  c->Freeze();
}

// Costs where two tokens cost five times one (the CPU backend today).
void CpuLike(SpecCosts* c) {
  c->ObserveVerify(0, 0.0013);
  for (int n = 1; n <= 8; ++n) c->ObserveVerify(n, 0.0065 + 0.001 * n);
  for (int f = 1; f <= 8; ++f) c->ObserveDraft(f, 0.0001 * f);
  c->Freeze();
}

TEST(SpecPolicy, FixedModeReturnsKCappedByTheLimit) {
  SpecCosts c;
  CpuLike(&c);
  SpecPolicy p(SpecPolicyOptions{}, &c);
  EXPECT_EQ(p.Next(4, 10), 4);
  EXPECT_EQ(p.Next(4, 2), 2);
  EXPECT_EQ(p.Next(0, 10), 0);
  EXPECT_EQ(p.Next(4, 0), 0);
  EXPECT_FALSE(p.adaptive());
}

TEST(SpecPolicy, ExpectedTokensFollowTheEstimates) {
  SpecPolicyOptions o;
  o.adaptive = true;
  o.prior_accept = 0.5;
  SpecPolicy p(o, nullptr);
  EXPECT_DOUBLE_EQ(p.ExpectedTokens(0), 1.0);
  EXPECT_DOUBLE_EQ(p.ExpectedTokens(2), 1.0 + 0.5 + 0.25);
  // Observations: position 1 accepted, position 2 rejected.
  p.Observe(4, 4, 1);
  EXPECT_GT(p.alpha(1), 0.5);
  EXPECT_LT(p.alpha(2), 0.5);
  EXPECT_DOUBLE_EQ(p.alpha(3), p.alpha(2));  // not reached: leans on the position before
  // The draft stopped after 2 of 4 (unsure): pi_2 up, pi_3 down, pi_4 not seen.
  p.Observe(4, 2, 2);
  EXPECT_DOUBLE_EQ(p.pi(2), 1.0);
  EXPECT_LT(p.pi(3), 1.0);
  EXPECT_DOUBLE_EQ(p.pi(4), 1.0);
  // Without costs the fixed k is used.
  EXPECT_EQ(p.Next(3, 10), 3);
  // A position seen 3 times stands on its own observations.
  for (int i = 0; i < 3; ++i) p.Observe(4, 4, 2);
  EXPECT_DOUBLE_EQ(p.alpha(3), 0.0);
}

TEST(SpecPolicy, WarmsUpWithTheFixedKThenDecides) {
  SpecCosts c;
  GpuLike(&c);
  SpecPolicyOptions o;
  o.adaptive = true;
  o.warmup_steps = 2;
  o.prior_accept = 0.05;  // a prior that alone would say target-only
  SpecPolicy p(o, &c);
  EXPECT_EQ(p.Next(3, 100), 3);
  p.Observe(3, 3, 3);
  EXPECT_EQ(p.Next(3, 100), 3);
  p.Observe(3, 3, 3);
  // Two steps with every draft accepted: deeper positions inherit that, so it drafts long.
  EXPECT_GE(p.Next(3, 100), 6);
}

TEST(SpecPolicy, HighAcceptanceWithCheapVerifyDraftsLong) {
  SpecCosts c;
  GpuLike(&c);
  SpecPolicyOptions o;
  o.adaptive = true;
  SpecPolicy p(o, &c);
  for (int i = 0; i < 30; ++i) p.Observe(8, 8, 8);  // the draft is always right
  EXPECT_EQ(p.Next(4, 100), 8);
  EXPECT_EQ(p.Next(4, 3), 3);  // the limit still caps it
  // Rates: E(k)/T(k) is what it maximizes.
  EXPECT_GT(*p.ExpectedRate(8), *p.ExpectedRate(1));
  EXPECT_GT(*p.ExpectedRate(1), *p.ExpectedRate(0));
}

TEST(SpecPolicy, LowAcceptanceDraftsShort) {
  SpecCosts c;
  GpuLike(&c);
  SpecPolicyOptions o;
  o.adaptive = true;
  SpecPolicy p(o, &c);
  std::mt19937 rng(1);
  // Each position accepted with probability 0.35.
  for (int i = 0; i < 200; ++i) {
    int a = 0;
    while (a < 8 && std::uniform_real_distribution<>(0, 1)(rng) < 0.35) ++a;
    p.Observe(8, 8, a);
  }
  const int k = p.Next(4, 100);
  EXPECT_GE(k, 1);
  EXPECT_LE(k, 3);
}

TEST(SpecPolicy, FallsBackToTargetOnlyAndProbesNowAndThen) {
  SpecCosts c;
  GpuLike(&c);
  SpecPolicyOptions o;
  o.adaptive = true;
  o.probe_after = 4;
  o.probe_max = 16;
  SpecPolicy p(o, &c);
  for (int i = 0; i < 30; ++i) p.Observe(2, 2, 0);  // the draft is always wrong
  std::vector<int> ks;
  for (int i = 0; i < 60; ++i) {
    const int k = p.Next(4, 100);
    ks.push_back(k);
    if (k > 0) p.Observe(k, k, 0);  // the probe loses again
  }
  int probes = 0, first = -1;
  for (size_t i = 0; i < ks.size(); ++i) {
    if (ks[i] > 0) {
      ++probes;
      if (first < 0) first = static_cast<int>(i);
    }
  }
  EXPECT_EQ(first, 3) << "first probe after probe_after target-only steps";
  EXPECT_GE(probes, 2);
  EXPECT_LE(probes, 6) << "probes back off";
  // A probe that wins brings speculation back.
  for (int i = 0; i < 10; ++i) p.Observe(4, 4, 4);
  EXPECT_GT(p.Next(4, 100), 0);
}

TEST(SpecPolicy, RarelyProbesWhenDraftingCannotPay) {
  SpecCosts c;  // even perfect acceptance loses: 2 tokens cost 5x one
  CpuLike(&c);
  SpecPolicyOptions o;
  o.adaptive = true;
  o.probe_after = 2;
  SpecPolicy p(o, &c);
  // Only a rare probe (every 4 x probe_max steps) to measure the costs again.
  int probes = 0;
  for (int i = 0; i < 1200; ++i) probes += p.Next(4, 100) > 0;
  EXPECT_EQ(probes, 2);
}

TEST(SpecPolicy, MeasuresATargetOnlyStepWhenItsCostIsUnknown) {
  SpecCosts c;
  for (int n = 1; n <= 4; ++n) c.ObserveVerify(n, 0.005);
  for (int f = 1; f <= 4; ++f) c.ObserveDraft(f, 0.0001 * f);
  SpecPolicyOptions o;
  o.adaptive = true;
  o.draft_max = 4;
  SpecPolicy p(o, &c);
  for (int i = 0; i < 10; ++i) p.Observe(4, 4, 4);
  int zeros = 0;
  for (int i = 0; i < 16; ++i) {
    const int k = p.Next(4, 100);
    if (k == 0) {
      ++zeros;
      c.ObserveVerify(0, 0.004);  // what the loop records for that step
    }
  }
  EXPECT_EQ(zeros, 1) << "until a target-only step is measured";
  EXPECT_EQ(c.VerifyCount(0), 1);
}

}  // namespace
}  // namespace specd
