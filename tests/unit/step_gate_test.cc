// StepGate: concurrent requests' steps start together; a lagging member holds
// the others back at most one timeout, then is not waited for.
#include "common/spec/step_gate.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

namespace specd {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A gate whose every wait is `wait`, whatever the members' step times.
StepGateOptions FixedWait(milliseconds wait) {
  StepGateOptions o;
  o.min_wait = wait;
  o.max_wait = wait;
  return o;
}

TEST(StepGateTest, OneMemberNeverWaits) {
  StepGate gate;
  StepGate::Member m(&gate);
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(m.Start(), 0.0);
    EXPECT_EQ(m.Verify(), 0.0);
  }
  EXPECT_EQ(gate.Figures().start.opened, 0);
  EXPECT_EQ(gate.Figures().start.timed_out, 0);
}

TEST(StepGateTest, NullGateIsANoOp) {
  StepGate::Member m(nullptr);
  EXPECT_EQ(m.Start(), 0.0);
  EXPECT_EQ(m.Verify(), 0.0);
  EXPECT_EQ(m.Start(StepGate::Member::Step::kAlone), 0.0);
  EXPECT_FALSE(m.target_cohort().shared());
}

TEST(StepGateTest, StaggeredMembersStartTogether) {
  StepGate gate(FixedWait(milliseconds(2000)));  // long enough that only the last arrival opens the phases
  constexpr int kMembers = 4, kSteps = 5;
  std::vector<std::unique_ptr<StepGate::Member>> members;
  for (int i = 0; i < kMembers; ++i) members.push_back(std::make_unique<StepGate::Member>(&gate));
  const Clock::time_point t0 = Clock::now();
  // arrived[s][i], released[s][i]: when member i reached and left the gate at step s.
  std::vector<std::vector<double>> arrived(kSteps, std::vector<double>(kMembers)), released = arrived;
  std::vector<std::thread> threads;
  for (int i = 0; i < kMembers; ++i) {
    threads.emplace_back([&, i] {
      for (int s = 0; s < kSteps; ++s) {
        // Member i's "step" takes i x 3 ms: left alone they would drift apart.
        std::this_thread::sleep_for(milliseconds(3 * i));
        arrived[s][i] = Since(t0);
        members[i]->Start();
        released[s][i] = Since(t0);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int s = 0; s < kSteps; ++s) {
    double first_release = 1e9, last_arrival = 0;
    for (int i = 0; i < kMembers; ++i) {
      first_release = std::min(first_release, released[s][i]);
      last_arrival = std::max(last_arrival, arrived[s][i]);
    }
    // Nobody starts a step before the slowest member arrived (its 3 x 3 ms
    // step, s + 1 times): the four stay in phase.
    EXPECT_GE(first_release, last_arrival) << "step " << s;
    EXPECT_GE(first_release, 0.009 * (s + 1)) << "step " << s;
  }
  const GateFigures f = gate.Figures().start;
  EXPECT_EQ(f.opened, kSteps);
  EXPECT_EQ(f.members_released, kSteps * kMembers);
  EXPECT_EQ(f.timed_out, 0);
}

TEST(StepGateTest, LateMemberHoldsTheOthersOnceThenIsNotWaitedFor) {
  StepGate gate(FixedWait(milliseconds(200)));  // well above a thread start on a loaded 2-core CI machine
  StepGate::Member a(&gate), b(&gate), stuck(&gate);
  auto arrive_both = [&] {
    auto fb = std::async(std::launch::async, [&] { return b.Start(); });
    const double wa = a.Start();
    return std::max(wa, fb.get());
  };
  const Clock::time_point t0 = Clock::now();
  arrive_both();  // `stuck` never arrives: the phase opens after the timeout
  const double first = Since(t0);
  EXPECT_GE(first, 0.19);
  EXPECT_LT(first, 3.0);
  EXPECT_EQ(gate.Figures().start.timed_out, 1);
  // Now `stuck` is late: a and b are not held back again.
  for (int i = 0; i < 5; ++i) arrive_both();
  EXPECT_EQ(gate.Figures().start.timed_out, 1) << "a late member was waited for";
  // When it arrives again it counts again: the phase it waits in opens when
  // the other two arrive, not at its timeout.
  auto fs = std::async(std::launch::async, [&] { return stuck.Start(); });
  while (gate.waiting() == 0) std::this_thread::sleep_for(milliseconds(1));
  arrive_both();
  fs.get();
  EXPECT_EQ(gate.Figures().start.timed_out, 1);
  EXPECT_EQ(gate.Figures().start.members_released, 2 + 5 * 2 + 3);
}

TEST(StepGateTest, LeavingReleasesTheWaiters) {
  StepGate gate(FixedWait(milliseconds(5000)));
  StepGate::Member a(&gate);
  auto other = std::make_unique<StepGate::Member>(&gate);
  EXPECT_EQ(gate.members(), 2);
  const Clock::time_point t0 = Clock::now();
  auto fa = std::async(std::launch::async, [&] { return a.Start(); });
  std::this_thread::sleep_for(milliseconds(20));
  other.reset();  // the request ended: a must not wait for it
  fa.get();
  EXPECT_LT(Since(t0), 1.0);
  EXPECT_EQ(gate.members(), 1);
  EXPECT_EQ(gate.Figures().start.timed_out, 0);
}

TEST(StepGateTest, ATargetOnlyStepVerifiesWithItsCohortsProposals) {
  StepGate gate(FixedWait(milliseconds(2000)));
  StepGate::Member drafting(&gate), target_only(&gate);
  std::atomic<double> proposal_done{0}, target_only_verifies{0};
  const Clock::time_point t0 = Clock::now();
  auto f = std::async(std::launch::async, [&] {
    target_only.Start();
    target_only.Verify();  // no proposal to make: straight to Verify, where it waits
    target_only_verifies = Since(t0);
  });
  drafting.Start(StepGate::Member::Step::kPropose);
  std::this_thread::sleep_for(milliseconds(20));  // its proposal
  proposal_done = Since(t0);
  drafting.Verify();
  f.get();
  EXPECT_GE(target_only_verifies.load(), proposal_done.load()) << "the verifies should reach the target together";
  EXPECT_EQ(gate.Figures().verify.opened, 1);
  EXPECT_EQ(gate.Figures().verify.timed_out, 0);
}

// A cohort where nobody proposes has nothing to wait for before verifying
// (the target gathers the verifies by their cohort): a member slow to get
// there holds no one back.
TEST(StepGateTest, ACohortWithoutProposalsVerifiesAtOnce) {
  StepGate gate(FixedWait(milliseconds(2000)));
  StepGate::Member a(&gate), b(&gate);
  auto f = std::async(std::launch::async, [&] { a.Start(); });
  b.Start();
  f.get();
  const Clock::time_point t0 = Clock::now();
  EXPECT_EQ(a.Verify(), 0.0);  // b has not reached Verify
  EXPECT_LT(Since(t0), 0.5);
  EXPECT_EQ(b.Verify(), 0.0);
  EXPECT_EQ(a.target_cohort().size, 2);
  EXPECT_EQ(gate.Figures().verify.opened + gate.Figures().verify.timed_out, 0);
  // An n-gram proposal (kProposeAside) is waited for, though the draft worker
  // does not count it.
  auto g = std::async(std::launch::async, [&] { a.Start(StepGate::Member::Step::kProposeAside); });
  b.Start();
  g.get();
  EXPECT_FALSE(a.draft_cohort().shared());
  auto h = std::async(std::launch::async, [&] { return b.Verify(); });
  std::this_thread::sleep_for(milliseconds(20));
  a.Verify();
  EXPECT_GT(h.get(), 0.01) << "b waits for a's proposal";
}

TEST(StepGateTest, AStepAloneIsNotWaitedFor) {
  StepGate gate(FixedWait(milliseconds(5000)));
  StepGate::Member a(&gate), slow(&gate);
  auto f = std::async(std::launch::async, [&] { a.Start(); });
  slow.Start();
  f.get();
  // `slow` runs the draft's prefill in its next step: it starts that step at
  // once, a verifies and starts its next step without waiting for it (5 s
  // timeouts would fail the test's time).
  const Clock::time_point t0 = Clock::now();
  EXPECT_EQ(slow.Start(StepGate::Member::Step::kAlone), 0.0);
  EXPECT_FALSE(slow.target_cohort().shared());
  EXPECT_FALSE(slow.draft_cohort().shared());
  a.Verify();
  a.Start();
  EXPECT_LT(Since(t0), 2.0);
  EXPECT_EQ(gate.Figures().verify.timed_out + gate.Figures().start.timed_out, 0);
  // Back in step: once it arrives at Start it is waited for again. (It must
  // arrive first: while it is late, a Start of a's alone opens at once.)
  auto g = std::async(std::launch::async, [&] {
    slow.Verify();
    slow.Start();
  });
  while (gate.waiting() == 0) std::this_thread::sleep_for(milliseconds(1));
  a.Verify();
  a.Start();
  g.get();
  EXPECT_EQ(gate.Figures().start.opened, 2);
  EXPECT_EQ(gate.Figures().start.timed_out, 0);
}

// The workers learn each opening's cohort from its calls: every member
// released together carries the same id and the member count; the draft's
// tag counts the members that said they would propose.
TEST(StepGateTest, ReleasedMembersShareACohortTag) {
  using Step = StepGate::Member::Step;
  StepGate gate(FixedWait(milliseconds(5000)));
  StepGate::Member p1(&gate), p2(&gate), v(&gate);
  uint64_t last_id = 0;
  for (int step = 0; step < 3; ++step) {
    auto f1 = std::async(std::launch::async, [&] { p1.Start(Step::kPropose); });
    auto f2 = std::async(std::launch::async, [&] { p2.Start(Step::kPropose); });
    v.Start(Step::kVerify);
    f1.get();
    f2.get();
    for (const StepGate::Member* m : {&p1, &p2, &v}) {
      EXPECT_EQ(m->target_cohort().size, 3);
      EXPECT_EQ(m->target_cohort().id, v.target_cohort().id);
    }
    EXPECT_NE(v.target_cohort().id, 0u);
    EXPECT_NE(v.target_cohort().id, last_id) << "each opening is a new cohort";
    last_id = v.target_cohort().id;
    EXPECT_EQ(p1.draft_cohort().size, 2);
    EXPECT_EQ(p1.draft_cohort().id, p2.draft_cohort().id);
    EXPECT_FALSE(v.draft_cohort().shared()) << "it sends no proposal";
    auto g1 = std::async(std::launch::async, [&] { p1.Verify(); });
    auto g2 = std::async(std::launch::async, [&] { p2.Verify(); });
    v.Verify();
    g1.get();
    g2.get();
  }
  // The calls sent at the same point of the step: a verify sent with its
  // proposal counts with those (CohortTag::together), the others apart.
  {
    auto f1 = std::async(std::launch::async, [&] { p1.Start(Step::kProposeWithVerify); });
    auto f2 = std::async(std::launch::async, [&] { p2.Start(Step::kPropose); });
    v.Start(Step::kVerify);
    f1.get();
    f2.get();
    EXPECT_EQ(p1.target_cohort().size, 3);
    EXPECT_EQ(p1.target_cohort().gathered(), 1);
    EXPECT_EQ(p2.target_cohort().gathered(), 2);
    EXPECT_EQ(v.target_cohort().gathered(), 2);
    EXPECT_EQ(p1.draft_cohort().size, 2);  // both propose through the draft worker
    EXPECT_EQ(p2.draft_cohort().gathered(), 2);
    auto g1 = std::async(std::launch::async, [&] { p1.Verify(); });
    auto g2 = std::async(std::launch::async, [&] { p2.Verify(); });
    v.Verify();
    g1.get();
    g2.get();
  }
  // One proposer alone has no draft cohort to wait for.
  auto f1 = std::async(std::launch::async, [&] { p1.Start(Step::kPropose); });
  auto f2 = std::async(std::launch::async, [&] { p2.Start(Step::kVerify); });
  v.Start(Step::kVerify);
  f1.get();
  f2.get();
  EXPECT_FALSE(p1.draft_cohort().shared());
  EXPECT_EQ(p1.target_cohort().size, 3);
  // Two gates (two coordinators) never share ids.
  StepGate other(FixedWait(milliseconds(5000)));
  StepGate::Member o1(&other), o2(&other);
  auto h = std::async(std::launch::async, [&] { o1.Start(); });
  o2.Start();
  h.get();
  EXPECT_EQ(o1.target_cohort().size, 2);
  EXPECT_NE(o1.target_cohort().id, v.target_cohort().id);
}

}  // namespace
}  // namespace specd
