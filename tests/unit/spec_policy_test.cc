// The adaptive speculation policy and its cost table, with synthetic costs
// and acceptance (no models).
#include <array>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <random>

#include "absl/strings/str_format.h"

#include "common/spec/loop.h"
#include "common/spec/policy.h"
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
  c.ObserveVerify(0, 2.0);
  c.ObserveVerify(0, 2.5);  // the first two: the cheaper stands
  EXPECT_DOUBLE_EQ(*c.Verify(0), 2.0);
  c.ObserveVerify(0, 1.0);
  c.ObserveVerify(0, 3.0);  // from the third on: averaged
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

TEST(SpecCosts, TheFirstTwoCallsOfALengthDoNotSetItsCost) {
  // A CUDA verify of a new shape: run eagerly (12 ms), captured as a graph
  // (50 ms), then replayed (10 ms).
  SpecCosts c;
  c.ObserveVerify(4, 0.012);
  EXPECT_DOUBLE_EQ(*c.Verify(4), 0.012);
  c.ObserveVerify(4, 0.050);
  EXPECT_DOUBLE_EQ(*c.Verify(4), 0.012);
  c.ObserveVerify(4, 0.010);
  EXPECT_DOUBLE_EQ(*c.Verify(4), 0.010);
  c.ObserveVerify(4, 0.010);
  EXPECT_DOUBLE_EQ(*c.Verify(4), 0.010);
}

TEST(SpecCosts, ColdCallsStandInOnlyUntilAWarmOne) {
  // A CUDA verify of a new shape, run eagerly (30 ms) and captured (45 ms):
  // cold, the cell's cost until a warm one (12 ms) replaces them.
  SpecCosts c;
  c.ObserveVerify(4, 0.030, /*warm=*/false);
  EXPECT_DOUBLE_EQ(*c.Verify(4), 0.030);
  EXPECT_EQ(c.VerifyCount(4), 1);
  c.ObserveVerify(4, 0.045, false);
  EXPECT_DOUBLE_EQ(*c.Verify(4), 0.030);
  c.ObserveVerify(4, 0.012, true);
  EXPECT_DOUBLE_EQ(*c.Verify(4), 0.012);
  EXPECT_EQ(c.VerifyCount(4), 1);  // the cold ones are gone
  // Another shape of the same length, cold again: ignored from now on.
  for (int i = 0; i < 10; ++i) c.ObserveVerify(4, 0.040, false);
  EXPECT_DOUBLE_EQ(*c.Verify(4), 0.012);
  EXPECT_EQ(c.VerifyCount(4), 1);
  for (int i = 0; i < 3; ++i) c.ObserveVerify(4, 0.012, true);
  EXPECT_DOUBLE_EQ(*c.Verify(4), 0.012);
  EXPECT_EQ(c.VerifyCount(4), 4);
  // A length seen only cold next to a warm one: estimated from the warm ones, as one never seen.
  c.ObserveVerify(0, 0.050, false);
  EXPECT_EQ(c.VerifyCount(0), 0);
  EXPECT_DOUBLE_EQ(*c.Verify(0), 0.012);
  EXPECT_EQ(c.ToString().find("verify[0]"), std::string::npos) << c.ToString();
  c.ObserveVerify(0, 0.008, true);
  EXPECT_EQ(c.VerifyCount(0), 1);
  EXPECT_DOUBLE_EQ(*c.Verify(0), 0.008);
  // The draft's and the resume cells follow the same rule; unflagged calls are warm.
  c.ObserveDraft(2, 0.009, false);
  EXPECT_DOUBLE_EQ(*c.Draft(2), 0.009);
  c.ObserveDraft(2, 0.003);
  c.ObserveDraft(2, 0.008, false);
  EXPECT_DOUBLE_EQ(*c.Draft(2), 0.003);
  c.ObserveResume(8, 0.020, false);
  c.ObserveResume(8, 0.002, true);
  c.ObserveResume(8, 0.030, false);
  EXPECT_DOUBLE_EQ(c.Table(8).Resume(8), 0.002);
  // Loaded cells count as warm.
  SpecCosts l;
  ASSERT_TRUE(l.Load("verify[4]=12ms").ok());
  l.ObserveVerify(4, 0.040, false);
  EXPECT_DOUBLE_EQ(*l.Verify(4), 0.012);
}

// A proposal is f forwards, each paying its members: one line of draft
// cells per member count; a count never measured reads the nearest one.
// A warm-up measured into a table of its own is kept by absorbing it: each
// cell that holds a cost, once, at its mean; a cold cell beside warm ones
// (not a cost there) stays out.
TEST(SpecCosts, AbsorbsAnotherTablesCosts) {
  SpecCosts warm;
  for (int i = 0; i < 3; ++i) {
    warm.ObserveVerify(0, 0.010);
    warm.ObserveVerify(4, 0.014);
    warm.ObserveDraft(2, 0.004, true, 6);
    warm.ObserveResume(8, 0.002);
  }
  warm.ObserveVerify(7, 0.050, /*warm=*/false);
  warm.ObserveOverhead(true, 0.001);
  SpecCosts shared;
  shared.Absorb(warm);
  EXPECT_EQ(shared.ToString(), warm.ToString());
  EXPECT_EQ(shared.ToString().find("verify[7]"), std::string::npos) << shared.ToString();
  EXPECT_EQ(shared.VerifyCount(0), 1);  // once: a request's own observations soon outweigh it
  EXPECT_NEAR(*shared.Verify(2), 0.012, 1e-9);
  EXPECT_NEAR(*shared.Draft(2, 6), 0.004, 1e-9);
  shared.Absorb(shared);  // itself: nothing changes
  EXPECT_EQ(shared.VerifyCount(0), 1);
}

TEST(SpecCosts, DraftCellsPerMemberCount) {
  SpecCosts c;
  c.ObserveDraft(4, 0.004);  // alone: 1 ms a forward
  EXPECT_DOUBLE_EQ(*c.Draft(4, 6), 0.004);  // six never measured: the nearest count's (one)
  c.ObserveDraft(4, 0.006, true, 6);  // six: 1.5 ms a forward
  c.ObserveDraft(2, 0.003, true, 6);
  EXPECT_DOUBLE_EQ(*c.Draft(4), 0.004);
  EXPECT_DOUBLE_EQ(*c.Draft(3, 6), 0.0045);
  EXPECT_DOUBLE_EQ(*c.Draft(3, 5), 0.0045);  // five: six is nearer than one
  EXPECT_DOUBLE_EQ(*c.Draft(3, 2), 0.003);  // two: one is nearer
  EXPECT_DOUBLE_EQ(*c.Draft(3, 40), 0.0045);  // past kMaxMembers: its line
  c.ObserveVerify(0, 0.010);  // (a table needs both kinds)
  EXPECT_DOUBLE_EQ(c.Table(4, 6).Draft(4), 0.006);
  EXPECT_DOUBLE_EQ(c.Table(4).Draft(4), 0.004);
  // A row's cold cells stand in only while that row has no warm one.
  c.ObserveDraft(8, 0.020, false, 6);
  EXPECT_DOUBLE_EQ(*c.Draft(8, 6), 0.012);  // along six's line, not the cold 20 ms
  c.ObserveDraft(8, 0.020, false, 3);
  EXPECT_DOUBLE_EQ(*c.Draft(8, 3), 0.020);  // three holds only the cold one
  c.ForgetDraft();
  EXPECT_FALSE(c.Draft(4, 6).has_value());
}

// A kind of step whose overhead was never measured reads as the other's.
TEST(SpecCosts, AnUnmeasuredOverheadReadsAsTheOthers) {
  SpecCosts c;
  c.ObserveVerify(0, 0.010);
  c.ObserveDraft(1, 0.001);
  c.ObserveOverhead(true, 0.002);
  EXPECT_DOUBLE_EQ(c.Table(4).overhead_target, 0.002);
  EXPECT_DOUBLE_EQ(c.Table(4).overhead_draft, 0.002);
  c.ObserveOverhead(false, 0.0005);
  EXPECT_DOUBLE_EQ(c.Table(4).overhead_target, 0.0005);
  EXPECT_DOUBLE_EQ(c.Table(4).overhead_draft, 0.002);
}

// A target-only step makes a subset of a drafting step's calls: an overhead
// learned above the drafting one's (under other load, e.g. the first steps,
// and never measured again while the steps draft) reads as the drafting one's.
TEST(SpecCosts, TargetOnlyOverheadIsAtMostTheDraftingOnes) {
  SpecCosts c;
  c.ObserveVerify(0, 0.010);
  c.ObserveDraft(1, 0.001);
  c.ObserveOverhead(false, 0.0022);
  c.ObserveOverhead(true, 0.0010);
  EXPECT_DOUBLE_EQ(c.Table(4).overhead_target, 0.0010);
  EXPECT_DOUBLE_EQ(c.Table(4).overhead_draft, 0.0010);
  EXPECT_DOUBLE_EQ(c.Table(4).TargetOnly(), 0.010 + 0.0010);
}

// Prefills running beside the steps (SpecCosts::Prefill): a step whose
// interval overlapped one, in any way, is not quiet.
TEST(SpecCosts, AStepBesideAPrefillIsNotQuiet) {
  SpecCosts c;
  const int64_t before = c.QuietMark();
  ASSERT_GE(before, 0);
  EXPECT_TRUE(c.QuietSince(before));
  int64_t during = 0;
  {
    const SpecCosts::Prefill p(&c);
    EXPECT_FALSE(c.QuietSince(before));  // started since the mark
    during = c.QuietMark();
    EXPECT_EQ(during, -1);  // a step starting now runs beside it
  }
  EXPECT_FALSE(c.QuietSince(before));  // started and ended since the mark
  EXPECT_FALSE(c.QuietSince(during));
  const int64_t after = c.QuietMark();
  EXPECT_TRUE(c.QuietSince(after));
  {
    const SpecCosts::Prefill a(&c), b(&c);
  }
  EXPECT_FALSE(c.QuietSince(after));
  EXPECT_TRUE(c.QuietSince(c.QuietMark()));
  const SpecCosts::Prefill none(nullptr);  // no table: nothing to tell
  EXPECT_TRUE(c.QuietSince(c.QuietMark()));
}

TEST(SpecCosts, LoadsWhatToStringWrites) {
  SpecCosts a;
  a.ObserveVerify(0, 0.000299);
  a.ObserveVerify(4, 0.0005);
  a.ObserveDraft(1, 0.000126);
  a.ObserveDraft(4, 0.0058, true, 6);
  SpecCosts b;
  EXPECT_NE(a.ToString().find(" draft[1]=0.126ms draft[6x4]=5.800ms"), std::string::npos) << a.ToString();
  ASSERT_TRUE(b.Load(a.ToString()).ok());
  EXPECT_EQ(b.ToString(), a.ToString());
  EXPECT_NEAR(*b.Verify(2), 0.0003995, 1e-12);
  EXPECT_DOUBLE_EQ(*b.Draft(2, 6), 0.0029);
  for (const char* bad : {"verify[0]=1.0", "verify[0]=x ms", "draft[0]=1ms", "verify[99]=1ms", "vrfy[1]=1ms",
                          "verify[1]=-1ms", "verify1]=1ms", "draft[0x4]=1ms", "draft[17x4]=1ms", "draft[6x0]=1ms",
                          "verify[6x4]=1ms", "draft[x4]=1ms"}) {
    SpecCosts c;
    const absl::Status st = c.Load(bad);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("bad cost cell"), std::string::npos) << st;
  }
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

// Round 37's H100 (the 27B-class target, the 6-layer draft), the warm-up's
// greedy costs as call A printed them: a verify of k drafts, a draft forward,
// each step's overhead (target-only, drafting).
constexpr std::array<double, 9> kH100VerifyMs = {7.322, 7.461, 7.701, 7.862, 8.326, 8.334, 8.474, 8.644, 13.176};
constexpr double kH100DraftMs = 1.1, kH100OverheadMs[2] = {0.034, 0.05};
void H100Greedy(SpecCosts* c) {
  for (int n = 0; n <= 8; ++n) c->ObserveVerify(n, 1e-3 * kH100VerifyMs[static_cast<size_t>(n)]);
  for (int f = 1; f <= 8; ++f) c->ObserveDraft(f, 1e-3 * kH100DraftMs * f);
  c->ObserveResume(64, 1.638e-3);
  for (bool drafted : {false, true}) c->ObserveOverhead(drafted, 1e-3 * kH100OverheadMs[drafted]);
}

// One fresh 256-token request (seeded) on the H100's greedy costs, its clock
// those costs too: draft position i (0-based) is accepted with probability
// accept(i). fixed_k < 0: adaptive (warm-up k 4). nine_token_ms: the 9-token
// verify's cost, in the table and on the clock.
struct Replayed {
  double tokens_per_second = 0;
  int target_only = 0, asked_8 = 0;  // steps
};
Replayed ReplayOnH100(uint32_t seed, int fixed_k, const std::function<double(int)>& accept,
                      double nine_token_ms = kH100VerifyMs[8]) {
  SpecCosts c;
  H100Greedy(&c);
  if (nine_token_ms != kH100VerifyMs[8])
    for (int i = 0; i < 30; ++i) c.ObserveVerify(8, 1e-3 * nine_token_ms);  // the EWMA settles on it
  SpecPolicyOptions o;
  o.adaptive = fixed_k < 0;
  AcceptancePrior prior;
  SpecPolicy p(o, &c, &prior);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<> u(0, 1);
  Replayed r;
  int tokens = 0;
  double secs = 0;
  while (tokens < 256) {
    const int k = p.Next(fixed_k < 0 ? 4 : fixed_k, 256 - tokens);
    int acc = 0;
    while (acc < k && u(rng) < accept(acc)) ++acc;
    if (k > 0) p.Observe(k, k, acc);
    r.target_only += k == 0;
    r.asked_8 += k == 8;
    tokens += acc + 1;
    const double verify = k == 8 ? nine_token_ms : kH100VerifyMs[static_cast<size_t>(k)];
    secs += 1e-3 * (verify + (k > 0 ? kH100DraftMs * k : 0.0) + kH100OverheadMs[k > 0]);
  }
  r.tokens_per_second = tokens / secs;
  return r;
}

// 200 steps of 8 drafts, each position accepted with probability `a`.
void ObserveIndependent(SpecPolicy* p, double a) {
  std::mt19937 rng(1);
  for (int i = 0; i < 200; ++i) {
    int acc = 0;
    while (acc < 8 && std::uniform_real_distribution<>(0, 1)(rng) < a) ++acc;
    p->Observe(8, 8, acc);
  }
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
  // A deeper position leans on the one before as 3 pseudo-observations, however often it was seen:
  // position 3 rejected in all 3 steps that judged it keeps 3/6 of position 2's estimate.
  for (int i = 0; i < 3; ++i) p.Observe(4, 4, 2);
  EXPECT_NEAR(p.alpha(3), 0.5 * p.alpha(2), 1e-12);
  EXPECT_LT(p.alpha(3), 0.5 * p.alpha(2) + 1e-9);
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
  // Two steps with every draft accepted: positions 2-3 blend their two hits with position 1 at 3
  // pseudo-observations (2/5 weight each), so it drafts past the prior's target-only, but not yet long:
  // the trade-off of never trusting a few observations alone (a pair accepting 90% whose position 5 read
  // 0.5 after early rejections kept k = 3 for good before; round 40, ~80% pair: 0.980x the best fixed k
  // against 0.955x). More full acceptances ramp it up.
  const int after_two = p.Next(3, 100);
  EXPECT_GE(after_two, 3);
  for (int i = 0; i < 4; ++i) p.Observe(after_two, after_two, after_two);
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
  ObserveIndependent(&p, 0.35);
  const int k = p.Next(4, 100);
  EXPECT_GE(k, 1);
  EXPECT_LE(k, 3);
}

// A fresh pair's first request (no AcceptancePrior) whose first steps lose:
// its position 1 starts from prior_accept as prior_accept_weight
// observations, so its first rejections (on a pair accepted ~55% of the time
// they come: the 6-layer pair on an H100, GPU costs) do not send it
// target-only; with no weight two did, and such a request stayed there
// (round 37: 249 of its 255 steps, 0.78x fixed k = 3). A draft that keeps
// losing still goes.
TEST(SpecPolicy, AFreshRequestsFirstRejectionsDoNotDecideAlone) {
  SpecCosts c;
  H100Greedy(&c);
  // Steps, every draft rejected, until the policy goes target-only.
  auto rejections_to_stop = [&](double weight) {
    SpecPolicyOptions o;
    o.adaptive = true;
    o.prior_accept_weight = weight;
    AcceptancePrior prior;
    SpecPolicy p(o, &c, &prior);
    int steps = 0;
    for (int k = p.Next(4, 200); k > 0 && steps < 50; k = p.Next(4, 200), ++steps) p.Observe(k, k, 0);
    return steps;
  };
  EXPECT_EQ(rejections_to_stop(0), 3);  // alpha_1 = 0 once three are seen
  // While drafting it stops where target-only is 5% faster (stop_margin): alpha_1 < 8.61 / (7.36 x 1.05) - 1 =
  // 0.115, which (3 x 0.6) / (3 + n) falls under after 13 rejections.
  EXPECT_EQ(rejections_to_stop(3), 13);
  EXPECT_EQ(rejections_to_stop(SpecPolicyOptions{}.prior_accept_weight), 13);
}

TEST(SpecPolicy, NowAndThenAsksOnePositionDeeper) {
  SpecCosts c;
  GpuLike(&c);
  SpecPolicyOptions o;
  o.adaptive = true;
  o.explore_every = 16;
  SpecPolicy p(o, &c);
  ObserveIndependent(&p, 0.35);
  std::vector<int> ks;
  for (int i = 0; i < 32; ++i) ks.push_back(p.Next(4, 100));
  const int best = ks[0];
  ASSERT_GE(best, 1);
  ASSERT_LT(best, 8);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(ks[static_cast<size_t>(i)], (i + 1) % 16 == 0 ? best + 1 : best) << i;
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

TEST(SpecPolicy, SpacesProbesByTheirCatchUpCost) {
  SpecCosts c;
  for (int n = 0; n <= 8; ++n) c.ObserveVerify(n, 0.010 + 0.0005 * n);
  for (int f = 1; f <= 8; ++f) c.ObserveDraft(f, 0.001 * f);
  // Catching up costs 6 ms a token more than a target step's 10 ms: the
  // longer the wait, the dearer the probe, so it comes only at probe_max.
  c.ObserveResume(8, 0.050);
  c.ObserveResume(32, 0.194);
  c.Freeze();
  SpecPolicyOptions o;
  o.adaptive = true;
  o.probe_after = 4;
  o.probe_max = 40;
  SpecPolicy p(o, &c);
  for (int i = 0; i < 30; ++i) p.Observe(2, 2, 0);  // the draft is always wrong
  int first = -1;
  for (int i = 0; i < 60 && first < 0; ++i) {
    if (p.Next(4, 100) > 0) first = i;
  }
  EXPECT_EQ(first, 39) << "the first probe waits for probe_max, not probe_after";
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

TEST(SpecCosts, ResumeIsALineThroughTheObservedCatchUps) {
  SpecCosts c;
  c.ObserveVerify(0, 0.01);
  EXPECT_DOUBLE_EQ(c.Table(4).Resume(8), 0.0);  // unobserved: free
  c.ObserveResume(8, 0.002);
  EXPECT_DOUBLE_EQ(c.Table(4).Resume(30), 0.002);  // one length seen: flat
  c.ObserveResume(32, 0.005);
  const CostTable t = c.Table(4);
  EXPECT_NEAR(t.Resume(8), 0.002, 1e-12);
  EXPECT_NEAR(t.Resume(16), 0.003, 1e-12);
  EXPECT_DOUBLE_EQ(t.Resume(0), 0.0);  // nothing to catch up on
  c.ObserveResume(500, 0.1);           // counted at kMaxLen
  EXPECT_NE(c.ToString().find("resume[64]=100.000ms"), std::string::npos) << c.ToString();
  c.ObserveResume(4, -1.0);  // faster than a normal proposal: no cost, not a negative one
  EXPECT_NE(c.ToString().find("resume[4]=0.000ms"), std::string::npos) << c.ToString();
  c.ForgetDraft();
  EXPECT_EQ(c.ToString().find("resume"), std::string::npos) << c.ToString();
  EXPECT_NE(c.ToString().find("verify"), std::string::npos) << "the target's costs stay";
}

TEST(PositionEstimates, AveragesThenFollowsAndLeansOnThePositionBefore) {
  PositionEstimates e(4);
  EXPECT_DOUBLE_EQ(e.Alpha(1, 0.6), 0.6);  // nothing seen: the base
  e.Observe(4, 4, 1, 0.1);                 // 1 accepted, 2 rejected, 3 and 4 not judged
  EXPECT_DOUBLE_EQ(e.alpha[1], 1.0);
  EXPECT_DOUBLE_EQ(e.alpha[2], 0.0);
  EXPECT_DOUBLE_EQ(e.n_alpha[3], 0.0);
  EXPECT_DOUBLE_EQ(e.Alpha(3, 0.6), e.Alpha(2, 0.6));
  // Position 1 counts its observations up to 3 against the base; a deeper one is a blend with the one before at
  // 3 pseudo-observations: w = n / (n + 3).
  EXPECT_DOUBLE_EQ(e.Alpha(2, 0.6), (1.0 / 4) * 0.0 + (3.0 / 4) * e.Alpha(1, 0.6));
  e.Observe(4, 2, 2, 0.1);  // the draft stopped after 2 of 4: pi_3 down, pi_4 not seen
  EXPECT_DOUBLE_EQ(e.pi[2], 1.0);
  EXPECT_DOUBLE_EQ(e.pi[3], 2.0 / 3);  // the prior 1 as one observation, a hit, then a miss
  EXPECT_DOUBLE_EQ(e.n_pi[4], 2.0);
  EXPECT_DOUBLE_EQ(e.pi[4], 1.0);
  for (int i = 0; i < 40; ++i) e.Observe(1, 1, 0, 0.1);
  EXPECT_LT(e.alpha[1], 0.02) << "an EWMA follows the latest observations";
}

TEST(AcceptancePrior, LearnsAcrossRequestsAndResets) {
  AcceptancePrior prior;
  for (int i = 0; i < 100; ++i) prior.Observe(2, 2, i % 4 == 0 ? 0 : 2);  // 75% accepted at position 1
  EXPECT_EQ(prior.steps(), 100);
  const PositionEstimates p = prior.Snapshot();
  EXPECT_NEAR(p.alpha[1], 0.75, 0.05);
  EXPECT_NEAR(p.alpha[2], 1.0, 1e-9);
  EXPECT_NE(prior.ToString().find("steps=100 alpha[1]=0.7"), std::string::npos) << prior.ToString();
  prior.Reset();
  EXPECT_EQ(prior.steps(), 0);
  EXPECT_DOUBLE_EQ(prior.Snapshot().n_alpha[1], 0.0);
}

TEST(AcceptancePrior, LoadsWhatToStringWritesAndSeedsAPolicy) {
  AcceptancePrior a;
  for (int i = 0; i < 40; ++i) {
    a.Observe(4, i % 5 == 0 ? 2 : 4, i % 3);
    a.ObserveConfidence(0.05f + 0.023f * static_cast<float>(i), i % 4 != 0);
  }
  AcceptancePrior b;
  ASSERT_TRUE(b.Load(a.ToString()).ok()) << a.ToString();
  EXPECT_EQ(b.ToString(), a.ToString());
  EXPECT_EQ(b.steps(), 40);
  const PositionEstimates pa = a.Snapshot(), pb = b.Snapshot();
  for (int i = 1; i <= 4; ++i) {
    EXPECT_NEAR(pb.alpha[i], pa.alpha[i], 1e-3) << i;
    EXPECT_NEAR(pb.pi[i], pa.pi[i], 1e-3) << i;
  }
  EXPECT_NEAR(b.Confidence().AcceptedAbove(0.5f), a.Confidence().AcceptedAbove(0.5f), 1e-2);
  // A policy starts from it at once (no warm-up): informed.
  SpecCosts costs;
  SpecPolicyOptions o;
  o.adaptive = true;
  EXPECT_TRUE(SpecPolicy(o, &costs, &b).informed());
  // Bad text is refused and changes nothing.
  for (const char* bad : {"alpha[1]=0.5", "steps=3 alpha[0]=0.5", "steps=3 alpha[1]=1.5", "steps=3 beta[1]=0.5",
                          "steps=x", "steps=3 conf[0.5]=0.5", "steps=3 pi[2]"}) {
    EXPECT_EQ(b.Load(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(b.steps(), 40);
}

TEST(ConfidenceBins, ShareAndAcceptanceAboveAThreshold) {
  ConfidenceBins b;
  EXPECT_DOUBLE_EQ(b.ShareAbove(0.0f), 0.0);
  EXPECT_DOUBLE_EQ(b.AcceptedAbove(0.5f), 0.0);
  // Bin i (confidence i/10 .. (i+1)/10): 100 tokens, accepted i/10 + 0.05 of the time.
  for (int bin = 0; bin < 10; ++bin) {
    for (int j = 0; j < 100; ++j) b.Observe((bin + 0.5f) / 10, j < bin * 10 + 5);
  }
  EXPECT_DOUBLE_EQ(b.total(), 1000.0);
  EXPECT_DOUBLE_EQ(b.ShareAbove(0.0f), 1.0);
  EXPECT_DOUBLE_EQ(b.ShareAbove(0.7f), 0.3);
  EXPECT_DOUBLE_EQ(b.AcceptedAbove(0.0f), 0.5);
  EXPECT_NEAR(b.AcceptedAbove(0.7f), 0.85, 1e-12);
  b.Observe(-1.0f, true);  // unknown confidence: ignored
  b.Observe(1.0f, true);   // the top edge counts in the last bin
  EXPECT_DOUBLE_EQ(b.n[9], 101.0);
}

TEST(SpecPolicy, LearnsTheConfidenceThresholdFromThePair) {
  SpecCosts c;
  GpuLike(&c);  // one more position costs ~1.5 ms at ~100+ tokens/s: alpha* ~ 0.2-0.3
  AcceptancePrior prior;
  SpecPolicyOptions o;
  o.adaptive = true;
  o.warmup_steps = 0;
  SpecPolicy p(o, &c, &prior);
  EXPECT_FLOAT_EQ(p.MinConfidence(0.5f), 0.5f) << "the fallback until measured";
  // The draft's first token: accepted 90% above confidence 0.3, 5% below.
  for (int i = 0; i < 400; ++i) {
    const float conf = (i % 10) / 10.0f + 0.05f;
    const bool acc = conf > 0.3f ? i % 10 != 9 || i % 20 != 9 : i % 20 == 0;
    p.Observe(4, 4, acc ? 4 : 0, conf);
  }
  ASSERT_GE(p.Next(4, 100), 2);
  EXPECT_FLOAT_EQ(p.MinConfidence(0.5f), 0.3f) << "the unsure tokens are almost never accepted: cut them";
  // A draft right 70% of the time whatever its confidence (flat
  // distributions): cutting only loses tokens, the threshold is 0.
  // (With drafting and verify slots nearly free, every cut only loses.)
  SpecCosts cheap;
  for (int n = 0; n <= 8; ++n) cheap.ObserveVerify(n, 0.010 + 0.0001 * n);
  for (int f = 1; f <= 8; ++f) cheap.ObserveDraft(f, 0.0001 * f);
  cheap.Freeze();
  AcceptancePrior flat_prior;
  SpecPolicy flat(o, &cheap, &flat_prior);
  for (int i = 0; i < 400; ++i) {
    const int acc = i % 7 < 5 ? 4 : 0;  // independent of the confidence
    flat.Observe(4, 4, acc, (i % 10) / 10.0f + 0.05f);
  }
  ASSERT_GE(flat.Next(4, 100), 2);
  EXPECT_FLOAT_EQ(flat.MinConfidence(0.5f), 0.0f);
  // Fixed-mode policies do not feed it.
  SpecPolicy fixed(SpecPolicyOptions{}, &c, &prior);
  const double n0 = prior.Confidence().n[0];
  fixed.Observe(4, 4, 0, 0.05f);
  EXPECT_DOUBLE_EQ(prior.Confidence().n[0], n0);
  EXPECT_NE(prior.ToString().find("conf[0.9]="), std::string::npos) << prior.ToString();
}

TEST(SpecPolicy, StartsFromThePairsPriorWithoutWarmUp) {
  SpecCosts c;
  GpuLike(&c);
  AcceptancePrior prior;
  SpecPolicyOptions o;
  o.adaptive = true;
  o.prior_accept = 0.6;
  o.prior_steps = 16;
  {
    SpecPolicy first(o, &c, &prior);
    EXPECT_FALSE(first.informed()) << "no prior yet";
    EXPECT_EQ(first.Next(3, 100), 3) << "warm-up with the fixed k";
    for (int i = 0; i < 20; ++i) first.Observe(2, 2, 0);  // this pair's drafts are always wrong
  }
  EXPECT_EQ(prior.steps(), 20);
  SpecPolicy next(o, &c, &prior);
  EXPECT_TRUE(next.informed());
  EXPECT_LT(next.alpha(1), 0.05);
  EXPECT_EQ(next.Next(3, 100), 0) << "the prior says target-only from the first step";
  // The request's own observations soon outweigh the prior.
  for (int i = 0; i < 20; ++i) next.Observe(4, 4, 4);
  EXPECT_GT(next.alpha(1), 0.6);
  EXPECT_GT(next.Next(3, 100), 0);
  // Fixed-k requests neither read nor feed it.
  SpecPolicyOptions fixed;
  SpecPolicy f(fixed, &c, &prior);
  f.Observe(4, 4, 4);
  EXPECT_EQ(prior.steps(), 40);
}

// Rates at given acceptance against the costs: a policy whose estimates hold
// `a` at every position after many observations.
SpecPolicy Seasoned(const SpecPolicyOptions& o, const SpecCosts* c, double a) {
  SpecPolicy p(o, c);
  for (int i = 0; i < 400; ++i) {
    int acc = 0;
    // Deterministic pattern with acceptance a at each position.
    while (acc < 4 && std::fmod((i * 7 + acc * 3) * 0.6180339887, 1.0) < a) ++acc;
    p.Observe(4, 4, acc);
  }
  return p;
}

TEST(SpecPolicy, StopsOnlyWhenTargetOnlyIsClearlyFaster) {
  // Costs where one draft at acceptance ~0.5 is near break-even.
  SpecCosts c;
  for (int n = 0; n <= 4; ++n) c.ObserveVerify(n, 0.010 + 0.004 * n);
  for (int f = 1; f <= 4; ++f) c.ObserveDraft(f, 0.001 * f);
  c.Freeze();
  SpecPolicyOptions o;
  o.adaptive = true;
  o.draft_max = 4;
  o.warmup_steps = 0;
  o.stop_margin = 0.10;
  // Break-even acceptance for k=1: (1 + a) / 0.015 = 1 / 0.010, a = 0.5.
  SpecPolicy slightly_worse = Seasoned(o, &c, 0.46);
  ASSERT_LT(*slightly_worse.ExpectedRate(1), *slightly_worse.ExpectedRate(0));
  ASSERT_GT(*slightly_worse.ExpectedRate(1) * 1.1, *slightly_worse.ExpectedRate(0));
  EXPECT_EQ(slightly_worse.Next(1, 100), 1) << "within the margin: keeps drafting";
  SpecPolicy clearly_worse = Seasoned(o, &c, 0.2);
  EXPECT_EQ(clearly_worse.Next(1, 100), 0);
  o.stop_margin = 0;
  SpecPolicy no_margin = Seasoned(o, &c, 0.46);
  EXPECT_EQ(no_margin.Next(1, 100), 0);
}

TEST(SpecPolicy, ChargesTheCatchUpToResuming) {
  SpecCosts c;
  for (int n = 0; n <= 4; ++n) c.ObserveVerify(n, 0.010 + 0.001 * n);
  for (int f = 1; f <= 4; ++f) c.ObserveDraft(f, 0.001 * f);
  c.ObserveResume(8, 0.040);  // catching up on 8 tokens costs 4 target steps
  c.Freeze();
  SpecPolicyOptions o;
  o.adaptive = true;
  o.draft_max = 4;
  o.warmup_steps = 0;
  o.probe_after = 1000;  // no probes in this test
  o.resume_horizon = 4;
  SpecPolicy p = Seasoned(o, &c, 0.3);  // drafting pays a little: ~1.3 tokens for 1.2 steps' time at k=1
  ASSERT_GT(*p.ExpectedRate(1), *p.ExpectedRate(0));
  EXPECT_GT(p.Next(1, 100), 0) << "in sync: drafting pays";
  // Ten target-only steps (the draft failed, say): resuming now would first
  // cost the catch-up, 10 ms a step over 4 steps, more than drafting gains.
  for (int i = 0; i < 10; ++i) p.Next(1, 100);
  EXPECT_EQ(p.Next(1, 100), 0);
  // Once it drafts again (a probe), the draft is in sync and drafting pays.
  p.Observe(1, 1, 1);
  EXPECT_GT(p.Next(1, 100), 0);
}

// Costs where drafting 4 pays and no target-only step is measured; adaptive, at most 4 drafts.
SpecPolicyOptions NoTargetOnlyCost(SpecCosts* c) {
  for (int n = 1; n <= 4; ++n) c->ObserveVerify(n, 0.005);
  for (int f = 1; f <= 4; ++f) c->ObserveDraft(f, 0.0001 * f);
  SpecPolicyOptions o;
  o.adaptive = true;
  o.draft_max = 4;
  return o;
}

TEST(SpecPolicy, MeasuresATargetOnlyStepWhenItsCostIsUnknown) {
  SpecCosts c;
  const SpecPolicyOptions o = NoTargetOnlyCost(&c);
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

// In a batch shared with speculating sequences the probe's step is priced at
// the batch's drafts per member, not as a target-only step: the request asks
// for it once, not every 8th step.
TEST(SpecPolicy, ProbesTargetOnlyOncePerRequestWhenTheBatchPricesIt) {
  SpecCosts c;
  const SpecPolicyOptions o = NoTargetOnlyCost(&c);
  for (int request = 0; request < 2; ++request) {
    SpecPolicy p(o, &c);
    for (int i = 0; i < 10; ++i) p.Observe(4, 4, 4);
    int zeros = 0;
    for (int i = 0; i < 40; ++i) {
      const int k = p.Next(4, 100);
      if (k == 0) {
        ++zeros;
        c.ObserveVerify(4, 0.005);  // the batch's cell (its members drafted 4)
      } else {
        p.Observe(k, k, k);
      }
    }
    EXPECT_EQ(zeros, 1) << "request " << request;
  }
  EXPECT_EQ(c.VerifyCount(0), 0);
}

// Sharing the workers' batches (lockstep), a request decides with the pair's
// estimates, the same for every member, not with its own.
TEST(SpecPolicy, InASharedBatchDecidesWithThePairsEstimates) {
  SpecCosts c;
  GpuLike(&c);
  AcceptancePrior prior;
  ASSERT_TRUE(prior.Load("steps=1000 alpha[1]=0.95 alpha[2]=0.95 alpha[3]=0.95 alpha[4]=0.95 alpha[5]=0.95 "
                         "alpha[6]=0.95 alpha[7]=0.95 alpha[8]=0.95").ok());
  SpecPolicyOptions o;
  o.adaptive = true;
  SpecPolicy p(o, &c, &prior);
  for (int i = 0; i < 20; ++i) p.Observe(8, 8, 1);  // this request: the second draft is always wrong
  const int alone = p.Next(4, 100);
  p.set_batch(6);
  const int shared = p.Next(4, 100);
  EXPECT_GT(p.alpha(2), 0.7);  // the pair's
  p.set_batch(1);
  EXPECT_EQ(p.Next(4, 100), alone);
  EXPECT_LT(p.alpha(2), 0.5);  // its own
  EXPECT_LE(alone, 3);
  // Six members drafting n verify 6 (n + 1) tokens (GpuLike's cells extrapolated: 0.5 ms a token), so the
  // pair's 95% makes 4..8 about equal.
  EXPECT_GE(shared, 4);
}

// A fresh request (no prior) of a pair whose acceptance comes in streaks
// (the device's ~80% pair: a first draft right 80% of the time, the ones
// after it 97%), at that run's costs (draft forward 1.27 ms, verify of n
// drafts 9.8 + 0.07 n ms), each new verify length cold twice (eager, then a
// graph capture): within a 64-step generate it must find that deep drafts
// pay. (Round 9's fresh generate on the device held k ~ 4 where k = 7 was
// best: 0.82x.)
TEST(SpecPolicy, AFreshRequestLearnsDeepPositionsWithinAShortGenerate) {
  // The costs are learned as the request runs (as in `specd generate`).
  SpecCosts c;
  auto verify = [](int n) { return 0.0098 + 0.00007 * n; };
  auto draft = [](int f) { return 0.00127 * f; };
  SpecPolicyOptions o;
  o.adaptive = true;
  SpecPolicy p(o, &c);
  std::string ks;
  int seen[9] = {};
  std::mt19937 rng(3);
  std::uniform_real_distribution<> u(0, 1);
  double tokens = 0, seconds = 0;
  for (int step = 0; step < 64; ++step) {
    const int k = p.Next(4, 100);
    ks += std::to_string(k);
    int acc = 0;
    while (acc < k && u(rng) < (acc == 0 ? 0.8 : 0.97)) ++acc;
    if (k > 0) {
      c.ObserveDraft(k, draft(k));
      p.Observe(k, k, acc);
    }
    // A CUDA backend runs a new verify shape eagerly once, then captures it
    // as a graph (tens of ms), then replays it.
    const double cold = seen[k] == 0 ? 0.003 : seen[k] == 1 ? 0.040 : 0.0;
    ++seen[k];
    c.ObserveVerify(k, verify(k) + cold);
    tokens += acc + 1;
    seconds += verify(k) + cold + (k > 0 ? draft(k) : 0.0);
  }
  // Fixed k = 7 on the same pair: E = 1 + 0.8 (1 - 0.97^7) / 0.03 tokens per step.
  const double fixed7 = (1 + 0.8 * (1 - std::pow(0.97, 7)) / 0.03) / (verify(7) + draft(7));
  EXPECT_GE(tokens / seconds, 0.93 * fixed7) << "k per step " << ks << "; alpha(5..8) = " << p.alpha(5) << " "
                                              << p.alpha(6) << " " << p.alpha(7) << " " << p.alpha(8);
}

// Fresh `specd generate` requests (a new process each: no AcceptancePrior) on
// the warm-up's greedy cost table of round 37's H100 (the 27B-class target,
// the 6-layer draft at 1.10 ms a forward), 256 tokens, positions accepted
// alpha_1 then 0.8 alpha_1 (iid), 200 seeds each: adaptive's mean rate within
// 3% of the best fixed k's, and no request stuck target-only where drafting
// pays. (Before position 1 counted the prior as observations: 0.98x at
// alpha_1 0.55 with 5 of 200 requests stuck, 0.975x at 0.35 with 25 stuck;
// with round 37's mixed greedy + sampled table 20 and 107.)
TEST(SpecPolicy, FreshRequestsOnGpuCostsKeepUpWithTheBestFixedK) {
  struct Outcome {
    double mean = 0;
    int stuck = 0;  // requests with more than 100 target-only steps
  };
  auto run = [&](double a1, int fixed_k) {  // fixed_k < 0: adaptive
    Outcome out;
    for (uint32_t seed = 0; seed < 200; ++seed) {
      const Replayed r = ReplayOnH100(seed, fixed_k, [&](int i) { return i == 0 ? a1 : 0.8 * a1; });
      out.mean += r.tokens_per_second / 200;
      out.stuck += r.target_only > 100 ? 1 : 0;
    }
    return out;
  };
  for (double a1 : {0.35, 0.55, 0.8}) {
    double best = 0;
    std::string fixed;
    for (int k = 0; k <= 4; ++k) {
      const double r = run(a1, k).mean;
      best = std::max(best, r);
      fixed += absl::StrFormat(" k%d=%.1f", k, r);
    }
    const Outcome a = run(a1, -1);
    EXPECT_GE(a.mean, 0.97 * best) << "alpha_1 " << a1 << ": adaptive " << a.mean << ", fixed" << fixed;
    EXPECT_EQ(a.stuck, 0) << "alpha_1 " << a1;
  }
}

// ---------------------------------------------------------------- lockstep

// Six streams in lockstep through the workers (round 15's six streams): each
// step the draft proposes for all of them in one batch, a forward per
// position while any member drafts (1.7 ms each, the H200's draft), and the
// target verifies all of them in one forward (4.9 ms + 0.66 ms a token
// scored: the H200's six streams at k = 0 / 4 / 8 took 8.9 / 24.8 / 40.3 ms).
// Every member pays both batches whatever it asked for. A pair accepted 90% a
// position: E(k) = (1 - 0.9^(k+1)) / 0.1 tokens a step, a step of the six
// drafting k costs 8.86 + 5.66 k ms, so k = 2 is best (1.18x target-only),
// k = 1..3 are within 3% of it and k = 8 is 0.83x.
struct LockstepRun {
  double tokens_per_second = 0;
  double mean_k = 0;  // drafts asked per member step
  CostTable table;    // the costs the policy read at the last step of all six (before the streams run out)
  std::string costs;
};

// Cold forwards (round 16, the H200's six streams): a CUDA backend runs a
// batch shape eagerly the first time it sees it (here 1.3x the warm time)
// and captures its graph the second (2.5x), then replays it. A shape is the
// batch's members and tokens (forwards, for the draft), and it changes as the
// sequences grow (attention plans, block tables: here every 32 lockstep
// steps). kNone: no cold forwards; kUnreported: cold forwards, fed to the
// cells as warm (before the workers reported them); kReported: the loop says
// which are cold (VerifyFigures::cold, ProposeFigures::cold).
enum class ColdShapes { kNone, kUnreported, kReported };

struct Lockstep {
  bool adaptive = false;
  int k = 4;  // fixed mode's k (adaptive: its warm-up k)
  // What the loop tells the policy since round 16 (cells keyed by
  // VerifyCostCell / DraftCostCell, set_batch); otherwise as before (cells
  // at each member's own length, no batch).
  bool batch_aware = true;
  ColdShapes cold = ColdShapes::kNone;
  // A stream rests between its requests (5 + 9 x its index steps), so that
  // the steps hold 1 to 6 members as streams come and go.
  bool gaps = false;
  // A draft forward costs 0.7 + 0.125 ms a member (the H200's 6-layer draft:
  // 1.45 ms a forward of six) instead of 1.7 ms whatever it holds, and the
  // streams start 3 steps apart (their explorations one position deeper
  // fall on different steps, as in the services).
  bool member_draft = false;
  // The loop's rule for a proposal whose members ran different lengths:
  // true: it counts as cold (DraftCell::plain); false: as warm (round 19).
  bool plain_rule = true;
  // A position is accepted with this probability.
  double accept = 0.9;
  // A member's proposal after target-only steps first catches the draft up
  // on their tokens, this long a token (the draft's prefill).
  double catch_up_ms = 0;
  // The H100's six streams (round 40, call S2's cells by forward tokens): a verify of T tokens costs 7.3-8.5 ms
  // up to 8, then 13.0 / 14.4 / 17.3 / 23.8 / 29.7 / 31.5 ms up to 16 / 24 / 32 / 40 / 48 / 56; a draft forward
  // 0.9 + 0.14 ms a member (draft[6x4] 6.9 ms); a stream rests 1 + its index % 3 steps between requests (its
  // prompt's prefill), so that most steps hold 5 or 6 members.
  bool h100 = false;
};

LockstepRun RunLockstep(const Lockstep& ls) {
  const bool adaptive = ls.adaptive, batch_aware = ls.batch_aware, gaps = ls.gaps;
  const int k = ls.k;
  const ColdShapes cold = ls.cold;
  constexpr int kStreams = 6, kRequests = 8, kTokens = 256;
  SpecCosts costs;
  AcceptancePrior prior;
  SpecPolicyOptions o;
  o.adaptive = adaptive;
  struct Stream {
    std::unique_ptr<SpecPolicy> policy;
    int left = 0, done = 0, asked = -1, resting = 0;
    int behind = 0;  // tokens since the member's last proposal (the draft's catch-up)
    std::mt19937 rng;
  };
  std::array<Stream, kStreams> streams;
  for (int i = 0; i < kStreams; ++i) {
    streams[i].rng.seed(17 + static_cast<uint32_t>(i));
    streams[i].policy = std::make_unique<SpecPolicy>(o, &costs, &prior);
    streams[i].left = kTokens;
    if (ls.member_draft) streams[i].resting = 3 * i;
  }
  std::uniform_real_distribution<> u(0, 1);
  LockstepRun run;
  double seconds = 0, asked = 0, member_steps = 0, tokens = 0;
  std::map<std::array<int, 4>, int> runs;  // per shape: times run so far
  // A batch's time on a backend that runs shapes cold: the factor, and whether it was cold.
  auto run_shape = [&](std::array<int, 4> shape) -> std::pair<double, bool> {
    if (cold == ColdShapes::kNone) return {1.0, false};
    const int n = runs[shape]++;
    return n == 0 ? std::pair{1.3, true} : n == 1 ? std::pair{2.5, true} : std::pair{1.0, false};
  };
  for (int step = 0;; ++step) {
    int members = 0, drafting = 0, forwards = 0, scored = 0, shortest = 0;
    for (Stream& s : streams) {
      s.asked = -1;
      if (s.done == kRequests) continue;
      if (s.resting > 0) {
        --s.resting;
        continue;
      }
      s.asked = s.policy->Next(k, s.left - 1);
      ++members;
      if (s.asked > 0) {
        ++drafting;
        shortest = shortest == 0 ? s.asked : std::min(shortest, s.asked);
      }
      forwards = std::max(forwards, s.asked);
      scored += s.asked + 1;
    }
    if (members == 0) break;
    if (members == kStreams) {
      run.table = costs.Table(SpecCosts::kMaxLen, batch_aware ? kStreams : 1);
      run.table.members = batch_aware ? kStreams : 1;  // as the policy prices a step
      run.costs = costs.ToString();
    }
    const auto [draft_x, draft_cold] = run_shape({0, drafting, forwards, step / 32});
    const auto [verify_x, verify_cold] = run_shape({1, members, scored, step / 32});
    // With gaps, the H200's matvec tiers (4, 8, 16 columns a pass, two passes past 16) instead of a line.
    const double tiers = scored <= 4 ? 0.008 : scored <= 8 ? 0.009 : scored <= 16 ? 0.011 : scored <= 32 ? 0.018 : 0.025;
    const double h100 = scored <= 8    ? 0.0073 + 0.00017 * (scored - 1)
                        : scored <= 16 ? 0.0130
                        : scored <= 24 ? 0.0144
                        : scored <= 32 ? 0.0173
                        : scored <= 40 ? 0.0238
                        : scored <= 48 ? 0.0297
                                       : 0.0315;
    // Draft forward j holds the members that asked for j or more.
    double draft_ms = 0;
    for (int j = 1; j <= forwards; ++j) {
      int held = 0;
      for (const Stream& s : streams) held += s.asked >= j ? 1 : 0;
      draft_ms += ls.h100 ? 0.9 + 0.14 * held : ls.member_draft ? 0.7 + 0.125 * held : 1.7;
    }
    double catch_up_ms = 0;
    for (const Stream& s : streams) catch_up_ms += s.asked > 0 ? ls.catch_up_ms * s.behind : 0.0;
    const double draft_s = 1e-3 * (draft_ms * draft_x + catch_up_ms),
                 verify_s = (ls.h100 ? h100 : gaps ? tiers : 0.0049 + 0.00066 * scored) * verify_x;
    const bool draft_warm = cold != ColdShapes::kReported || !draft_cold;
    const bool verify_warm = cold != ColdShapes::kReported || !verify_cold;
    seconds += draft_s + verify_s;
    for (Stream& s : streams) {
      if (s.asked < 0) continue;
      // What the loop observes of the two batches.
      VerifyFigures vf;
      vf.batch_seqs = members;
      vf.batch_tokens = scored;
      costs.ObserveVerify(batch_aware ? VerifyCostCell(vf, s.asked) : s.asked, verify_s, verify_warm);
      if (batch_aware) s.policy->set_batch(members);
      int acc = 0;
      while (acc < s.asked && u(s.rng) < ls.accept) ++acc;
      if (s.asked > 0) {
        ProposeFigures pf;
        pf.forwards = s.asked;
        pf.batch_seqs = drafting;
        pf.batch_forwards = forwards;
        pf.batch_mixed = ls.plain_rule && shortest != forwards;
        const DraftCell cell = DraftCostCell(pf);
        if (batch_aware) {
          costs.ObserveDraft(cell.forwards, draft_s, draft_warm && cell.plain, cell.members);
        } else {
          costs.ObserveDraft(s.asked, draft_s, draft_warm);
        }
        if (s.behind > 0) costs.ObserveResume(s.behind, 1e-3 * ls.catch_up_ms * s.behind);
        s.behind = 0;
        s.policy->Observe(s.asked, s.asked, acc);
      }
      asked += s.asked;
      ++member_steps;
      const int appended = std::min(acc + 1, s.left);
      if (s.asked == 0) s.behind += appended;
      tokens += appended;
      s.left -= appended;
      if (s.left == 0 && ++s.done < kRequests) {  // the stream's next request
        s.policy = std::make_unique<SpecPolicy>(o, &costs, &prior);
        s.left = kTokens;
        s.behind = 0;  // (the draft's prefill of a request's prompt is not a step's)
        if (gaps) s.resting = 5 + 9 * static_cast<int>(&s - streams.data());
        if (ls.h100) s.resting = 1 + static_cast<int>(&s - streams.data()) % 3;
      }
    }
  }
  run.tokens_per_second = tokens / seconds;
  run.mean_k = asked / member_steps;
  return run;
}

TEST(SpecPolicy, InLockstepTheCellsRiseWithKAndAdaptiveDraftsAsTheBestFixedK) {
  double best = 0;
  int best_k = 0;
  std::string fixed;
  for (int k = 0; k <= 8; ++k) {
    const double tps = RunLockstep({.k = k}).tokens_per_second;
    fixed += absl::StrFormat(" k%d=%.1f", k, tps);
    if (tps > best) {
      best = tps;
      best_k = k;
    }
  }
  EXPECT_EQ(best_k, 2) << fixed;
  const LockstepRun a = RunLockstep({.adaptive = true});
  const std::string why = absl::StrFormat("adaptive %.1f tok/s, mean k %.2f; fixed%s; %s", a.tokens_per_second,
                                          a.mean_k, fixed, a.costs);
  // The costs of a step of the six: Draft(f) = 1.7 f ms, a verify of n drafts each 8.86 + 3.96 n ms (a forward
  // of 6 (n + 1) tokens), rising with the length (within 12%: the lengths not measured are extrapolated).
  for (int n = 1; n <= 8; ++n) {
    EXPECT_NEAR(a.table.Draft(n), 0.0017 * n, 0.12 * 0.0017 * n) << n << ": " << why;
    EXPECT_NEAR(a.table.VerifyStep(n), 0.00886 + 0.00396 * n, 0.12 * (0.00886 + 0.00396 * n)) << n << ": " << why;
    EXPECT_GT(a.table.VerifyStep(n), a.table.VerifyStep(n - 1)) << n << ": " << why;
    if (n > 1) {
      EXPECT_GT(a.table.Draft(n), a.table.Draft(n - 1)) << n << ": " << why;
    }
  }
  EXPECT_NEAR(a.mean_k, 2.0, 0.5) << why;  // k = 1..3: within 3% of k = 2
  EXPECT_GE(a.tokens_per_second, 0.97 * best) << why;
  // As the loop keyed and decided before (round 15): flat cells, about 8 drafts a step, 0.83x.
  const LockstepRun own = RunLockstep({.adaptive = true, .batch_aware = false});
  EXPECT_GT(own.mean_k, 7.0) << own.costs;
  EXPECT_LT(own.tokens_per_second, 0.9 * best) << own.tokens_per_second << "; fixed" << fixed << "; " << own.costs;
}

// Cold forwards of new shapes (ColdShapes), as on the H200 (round 16: the
// adaptive run's verify[4] 15-24 ms against 13.3-14.5 ms in the fixed-k run,
// adaptive 0.95x of the best fixed k): reported, the cells keep the warm costs
// and adaptive asks for the k it asks for without cold forwards.
TEST(SpecPolicy, InLockstepColdShapesDoNotInflateTheCells) {
  double best = 0;
  std::string fixed;
  for (int k = 0; k <= 8; ++k) {  // fixed k reads no costs: reported or not is the same run
    const double tps = RunLockstep({.k = k, .cold = ColdShapes::kReported}).tokens_per_second;
    fixed += absl::StrFormat(" k%d=%.1f", k, tps);
    best = std::max(best, tps);
  }
  const LockstepRun warm = RunLockstep({.adaptive = true});
  const LockstepRun reported = RunLockstep({.adaptive = true, .cold = ColdShapes::kReported});
  const LockstepRun unreported = RunLockstep({.adaptive = true, .cold = ColdShapes::kUnreported});
  auto show = [](const char* name, const LockstepRun& r) {
    return absl::StrFormat("\n%s: %.1f tok/s, mean k %.2f; %s", name, r.tokens_per_second, r.mean_k, r.costs);
  };
  const std::string why =
      "fixed" + fixed + show("warm", warm) + show("reported", reported) + show("unreported", unreported);
  for (int n = 0; n <= 8; ++n) {
    EXPECT_NEAR(reported.table.VerifyStep(n), warm.table.VerifyStep(n), 0.02 * warm.table.VerifyStep(n)) << n << why;
    if (n > 0) {
      EXPECT_NEAR(reported.table.Draft(n), warm.table.Draft(n), 0.02 * warm.table.Draft(n)) << n << why;
    }
  }
  EXPECT_NEAR(reported.mean_k, warm.mean_k, 0.1) << why;
  // The cold runs themselves remain (adaptive's mixed lengths run more shapes than a fixed k): 0.93x the best
  // fixed k here (0.96x with round 16's cells per member length), against 0.92x unreported (mean k 3.02; 0.89x
  // and 4.87 before the first requests' position 1 started from the prior as observations: round 37). Since
  // deeper positions blend with the one before at 3 pseudo-observations (round 40) the reported run is 686
  // tok/s against 695 before (it ramps slower after full acceptances) and 1.01x the unreported one (1.02x).
  EXPECT_GE(reported.tokens_per_second, 0.92 * best) << why;
  EXPECT_GE(reported.tokens_per_second, 1.005 * unreported.tokens_per_second) << why;
  // Unreported, the cold forwards inflate the cells.
  double inflated = 0;
  for (int n = 0; n <= 8; ++n)
    inflated = std::max(inflated, unreported.table.VerifyStep(n) / warm.table.VerifyStep(n));
  EXPECT_GT(inflated, 1.1) << why;
}

// Streams that come and go (gaps between requests): the steps hold 1 to 6
// members, each priced at its members' forward (cells keyed by the forward's
// tokens), on the H200's matvec tiers (a verify's cost steps at 4, 8, 16
// and 32 tokens); adaptive stays within 3% of the best fixed k (1.00x here;
// so did round 16's cells per member length).
TEST(SpecPolicy, InLockstepWithStreamsComingAndGoingAdaptiveKeepsUp) {
  double best = 0;
  std::string fixed;
  for (int k = 0; k <= 8; ++k) {
    const double tps = RunLockstep({.k = k, .gaps = true}).tokens_per_second;
    fixed += absl::StrFormat(" k%d=%.1f", k, tps);
    best = std::max(best, tps);
  }
  const LockstepRun a = RunLockstep({.adaptive = true, .gaps = true});
  EXPECT_GE(a.tokens_per_second, 0.97 * best)
      << absl::StrFormat("adaptive %.1f tok/s, mean k %.2f; fixed%s; %s", a.tokens_per_second, a.mean_k, fixed,
                         a.costs);
}

// A draft forward that costs more the more members it holds (Lockstep::
// member_draft), and explorations one position deeper on different steps:
// the exploring member's extra forward holds it alone, so that proposal's
// time is not what that many forwards of six cost. Counted as warm (round
// 19's loop), lengths past the one drafted look cheaper than they are (here
// draft[6x4] 4.9 ms for 5.8, though with k = 1..3 within 1% of each other
// the throughput hardly moves: 806.3 against 806.9 tok/s); counted as cold
// (DraftCell::plain), the cells are the six's costs (within 5%) and adaptive
// drafts as the best fixed k.
// Six streams on the H100's tiers (Lockstep::h100), each step priced at its
// members: adaptive within 3-4% of the best fixed k at three acceptances
// (0.988x / 0.971x / 0.988x of k = 3 at 0.85 / 0.90 / 0.93; the services'
// figure, round 40 call S4: 1.00x of k = 4 in two runs).
TEST(SpecPolicy, InLockstepOnTheH100sTiersAdaptiveKeepsUp) {
  for (double a : {0.85, 0.9, 0.93}) {
    double best = 0;
    std::string fixed;
    for (int k = 0; k <= 8; ++k) {
      const double tps = RunLockstep({.k = k, .accept = a, .h100 = true}).tokens_per_second;
      fixed += absl::StrFormat(" k%d=%.1f", k, tps);
      best = std::max(best, tps);
    }
    const LockstepRun r = RunLockstep({.adaptive = true, .accept = a, .h100 = true});
    EXPECT_GE(r.tokens_per_second, 0.96 * best)
        << absl::StrFormat("accept %.2f: adaptive %.1f tok/s, mean k %.2f; fixed%s; %s", a, r.tokens_per_second,
                           r.mean_k, fixed, r.costs);
  }
}

TEST(SpecPolicy, InLockstepExplorationsDoNotMakeTheNextLengthLookCheap) {
  double best = 0;
  int best_k = 0;
  std::string fixed;
  for (int k = 0; k <= 8; ++k) {
    const double tps = RunLockstep({.k = k, .member_draft = true}).tokens_per_second;
    fixed += absl::StrFormat(" k%d=%.1f", k, tps);
    if (tps > best) {
      best = tps;
      best_k = k;
    }
  }
  const LockstepRun plain = RunLockstep({.adaptive = true, .member_draft = true});
  const LockstepRun mixed = RunLockstep({.adaptive = true, .member_draft = true, .plain_rule = false});
  auto show = [](const char* name, const LockstepRun& r) {
    return absl::StrFormat("\n%s: %.1f tok/s, mean k %.2f; %s", name, r.tokens_per_second, r.mean_k, r.costs);
  };
  const std::string why = absl::StrFormat("best fixed k %d; fixed%s", best_k, fixed) + show("plain", plain) +
                          show("mixed", mixed);
  // A proposal of six drafting f each: f x 1.45 ms.
  double cheapest = 1;
  for (int n = 1; n <= 8; ++n) {
    EXPECT_NEAR(plain.table.Draft(n), 0.00145 * n, 0.05 * 0.00145 * n) << n << why;
    cheapest = std::min(cheapest, mixed.table.Draft(n) / (0.00145 * n));
  }
  EXPECT_LT(cheapest, 0.95) << why;  // the mixed rule's cells: some length looks cheap
  EXPECT_GE(plain.tokens_per_second, 0.97 * best) << why;
  EXPECT_NEAR(plain.mean_k, best_k, 1.0) << why;
}

// A pair whose drafts do not pay at six streams (accepted 50% a position:
// target-only is the best fixed k). Adaptive verifies target-only and probes
// the draft now and then; a probe by one member holds the whole batch, so the
// members probe members x less often each, as one stream would.
TEST(SpecPolicy, InLockstepWhereDraftsDoNotPayTheBatchProbesAsOneStream) {
  double best = 0;
  int best_k = -1;
  std::string fixed;
  for (int k = 0; k <= 8; ++k) {
    const double tps = RunLockstep({.k = k, .accept = 0.5, .catch_up_ms = 0.1}).tokens_per_second;
    fixed += absl::StrFormat(" k%d=%.1f", k, tps);
    if (tps > best) {
      best = tps;
      best_k = k;
    }
  }
  const LockstepRun a = RunLockstep({.adaptive = true, .accept = 0.5, .catch_up_ms = 0.1});
  const std::string why = absl::StrFormat("adaptive %.1f tok/s, mean k %.3f; best fixed k %d; fixed%s; %s",
                                          a.tokens_per_second, a.mean_k, best_k, fixed, a.costs);
  EXPECT_EQ(best_k, 0) << why;
  EXPECT_GE(a.tokens_per_second, 0.97 * best) << why;
}

// Exploration asks one position deeper than the best k only where a deeper k
// could win if every position past it were accepted. On the H100's greedy
// costs a 9-token verify costs 1.5x the 8-token one, so for a pair accepting
// 90% a position (the ~80% pair; k = 7 best) asking 8 can never pay: round
// 38's GPU run asked it twice a request (0.96x the best fixed k), the replay
// 0.9 times (200 seeded 256-token requests). Where verify[8] is no jump, it
// still explores.
TEST(SpecPolicy, ExploresADeeperKOnlyWhereItCouldWin) {
  auto run = [&](double nine_token_ms, int fixed_k, double* asked_8) {
    double rate = 0;
    *asked_8 = 0;
    for (uint32_t seed = 0; seed < 200; ++seed) {
      const Replayed r = ReplayOnH100(seed, fixed_k, [](int) { return 0.9; }, nine_token_ms);
      rate += r.tokens_per_second / 200;
      *asked_8 += r.asked_8 / 200.0;
    }
    return rate;
  };
  double asked_8 = 0, unused = 0, best = 0;
  for (int k = 5; k <= 8; ++k) best = std::max(best, run(kH100VerifyMs[8], k, &unused));
  const double adaptive = run(kH100VerifyMs[8], -1, &asked_8);
  EXPECT_EQ(asked_8, 0.0) << "steps a request asking 8 where a 9-token verify costs " << kH100VerifyMs[8] << " ms";
  EXPECT_GE(adaptive, 0.965 * best) << "adaptive " << adaptive << ", best fixed " << best;  // 0.971 (0.967 before)
  run(8.8, -1, &asked_8);  // a 9-token verify as dear as the trend of the shorter ones
  EXPECT_GT(asked_8, 0.5) << "steps a request asking 8 where it could pay";
}

}  // namespace
}  // namespace specd
