// The coordinator's gathering of a lockstep cohort's calls into one message
// (coordinator/call_gatherer.h), against a fake transport that records each
// message and answers it on a thread of its own, as gRPC's callbacks do.
#include "coordinator/call_gatherer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <future>
#include <thread>

#include "proto/specd.pb.h"

namespace specd {
namespace {

using Gatherer = CallGatherer<v1::VerifyRequest, v1::VerifyResponse>;
using namespace std::chrono_literals;

// Records each message's sequences; answers every call with its sequence
// (accepted = seq), except `fail_seq` (NOT_FOUND), or fails whole messages.
class FakeTransport {
 public:
  Gatherer::SendFn Fn() {
    return [this](std::vector<Gatherer::CallPtr> calls, std::function<void()> done) {
      std::vector<int32_t> seqs;
      for (const auto& c : calls) seqs.push_back(c->req.seq());
      std::lock_guard<std::mutex> l(mu_);
      messages_.push_back(seqs);
      threads_.emplace_back([this, calls = std::move(calls), done = std::move(done)] {
        std::this_thread::sleep_for(1ms);
        for (const auto& c : calls) {
          if (fail_all) {
            c->status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker down");
          } else if (c->req.seq() == fail_seq) {
            c->status = grpc::Status(grpc::StatusCode::NOT_FOUND, "no such sequence");
          } else {
            c->resp.set_accepted(c->req.seq());
          }
        }
        done();
      });
    };
  }
  ~FakeTransport() {
    for (auto& t : threads_) t.join();
  }
  std::vector<std::vector<int32_t>> messages() {
    std::lock_guard<std::mutex> l(mu_);
    return messages_;
  }
  int32_t fail_seq = -1;
  bool fail_all = false;

 private:
  std::mutex mu_;
  std::vector<std::vector<int32_t>> messages_;
  std::vector<std::thread> threads_;  // joined after the gatherer (declared before it in each test)
};

v1::VerifyRequest Req(int32_t seq) {
  v1::VerifyRequest r;
  r.set_seq(seq);
  return r;
}

Deadline In(std::chrono::milliseconds d) { return std::chrono::system_clock::now() + d; }

TEST(CallGathererTest, ACohortsCallsLeaveAsOneMessageAndEachGetsItsReply) {
  FakeTransport t;
  Gatherer g(t.Fn(), 1s);  // a long wait: only completion sends
  const CohortTag tag{42, 3, 3};
  std::vector<std::future<std::pair<grpc::Status, int>>> got;
  for (int32_t seq : {1, 2, 3}) {
    got.push_back(std::async(std::launch::async, [&, seq] {
      auto c = g.Add(tag, 0, Req(seq), In(10s));
      const grpc::Status st = g.Wait(c);
      return std::make_pair(st, c->resp.accepted());
    }));
  }
  for (int i = 0; i < 3; ++i) {
    auto [st, accepted] = got[i].get();
    EXPECT_TRUE(st.ok()) << st.error_message();
    EXPECT_EQ(accepted, i + 1);
  }
  const auto m = t.messages();
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].size(), 3u);
  const GatherFigures f = g.Figures();
  EXPECT_EQ(f.messages, 1);
  EXPECT_EQ(f.calls, 3);
  EXPECT_EQ(f.short_sends, 0);
  EXPECT_EQ(f.ToString(), "1 messages, 3.00 calls each, 0 left short");
}

TEST(CallGathererTest, PhasesAndCohortsAreGatheredApart) {
  FakeTransport t;
  Gatherer g(t.Fn(), 1s);
  // Cohort 7: two verifies sent with their proposals (phase 1), one after (phase 0, alone in it).
  auto a = g.Add(CohortTag{7, 3, 2}, 1, Req(1), In(10s));
  auto b = g.Add(CohortTag{8, 2, 2}, 0, Req(5), In(10s));  // another cohort
  auto c = g.Add(CohortTag{7, 3, 1}, 0, Req(3), In(10s));  // complete at once: its group holds one call
  auto d = g.Add(CohortTag{7, 3, 2}, 1, Req(2), In(10s));
  auto e = g.Add(CohortTag{8, 2, 2}, 0, Req(6), In(10s));
  for (const auto& x : {a, b, c, d, e}) EXPECT_TRUE(g.Wait(x).ok());
  auto m = t.messages();
  std::sort(m.begin(), m.end());
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0], (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(m[1], (std::vector<int32_t>{3}));
  EXPECT_EQ(m[2], (std::vector<int32_t>{5, 6}));
}

TEST(CallGathererTest, AGroupLeavesShortAtItsWaitAndAStragglerGoesAlone) {
  FakeTransport t;
  Gatherer g(t.Fn(), 20ms);
  const CohortTag tag{9, 3, 3};
  const auto t0 = std::chrono::steady_clock::now();
  auto a = g.Add(tag, 0, Req(1), In(10s));
  auto b = g.Add(tag, 0, Req(2), In(10s));
  EXPECT_TRUE(g.Wait(a).ok());
  EXPECT_TRUE(g.Wait(b).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 20ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  auto late = g.Add(tag, 0, Req(3), In(10s));  // its group left: alone, at once
  EXPECT_TRUE(g.Wait(late).ok());
  EXPECT_EQ(late->resp.accepted(), 3);
  const auto m = t.messages();
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0], (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(m[1], (std::vector<int32_t>{3}));
  EXPECT_EQ(g.Figures().short_sends, 1);
}

TEST(CallGathererTest, ACallsOwnErrorAndAFailedMessageReachTheirCalls) {
  FakeTransport t;
  Gatherer g(t.Fn(), 1s);
  t.fail_seq = 2;
  auto a = g.Add(CohortTag{1, 2, 2}, 0, Req(1), In(10s));
  auto b = g.Add(CohortTag{1, 2, 2}, 0, Req(2), In(10s));
  EXPECT_TRUE(g.Wait(a).ok());
  EXPECT_EQ(g.Wait(b).error_code(), grpc::StatusCode::NOT_FOUND);
  t.fail_all = true;
  auto c = g.Add(CohortTag{2, 2, 2}, 0, Req(3), In(10s));
  auto d = g.Add(CohortTag{2, 2, 2}, 0, Req(4), In(10s));
  EXPECT_EQ(g.Wait(c).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(g.Wait(d).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(CallGathererTest, AWaitEndsAtTheCallsDeadline) {
  FakeTransport t;
  Gatherer g(t.Fn(), 2s);  // the group would leave only at its wait
  auto a = g.Add(CohortTag{3, 2, 2}, 0, Req(1), In(30ms));
  EXPECT_EQ(g.Wait(a).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The gatherer's end sends what is still open (and waits for it).
}

// Six members step 300 times through cohorts of both phases, some arriving
// late (past the wait) or not at all: every call gets its own reply, once.
TEST(CallGathererTest, ManyCohortsUnderLoadEachCallGetsItsOwnReply) {
  FakeTransport t;
  Gatherer g(t.Fn(), std::chrono::microseconds(300));
  constexpr int kMembers = 6, kSteps = 300;
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> members;
  for (int m = 0; m < kMembers; ++m) {
    members.emplace_back([&, m] {
      std::mt19937 rng(100 + m);
      for (int step = 0; step < kSteps; ++step) {
        if (rng() % 50 == 0) continue;  // this member left the step
        const int phase = static_cast<int>(rng() % 2);
        if (rng() % 20 == 0) std::this_thread::sleep_for(std::chrono::microseconds(500));  // late
        const int32_t seq = 1000 * (m + 1) + step;
        auto c = g.Add(CohortTag{static_cast<uint64_t>(step + 1), kMembers, kMembers}, phase, Req(seq), In(10s));
        const grpc::Status st = g.Wait(c);
        if (!st.ok()) ++failed;
        else if (c->resp.accepted() != seq) ++wrong;
      }
    });
  }
  for (auto& th : members) th.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  const GatherFigures f = g.Figures();
  int64_t calls = 0;
  for (const auto& m : t.messages()) calls += static_cast<int64_t>(m.size());
  EXPECT_EQ(f.calls, calls);
  EXPECT_LE(f.calls, kMembers * kSteps);
  EXPECT_GT(f.messages, 0);
}

}  // namespace
}  // namespace specd
