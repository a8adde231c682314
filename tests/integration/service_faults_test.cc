// Faults and changes under load, with the real processes: draft swap
// (target process unchanged), an incompatible draft refused, the draft
// killed (target-only, then reconnect), the target killed (UNAVAILABLE, new
// requests wait for it), both under concurrent lockstep requests, and the
// whole service on unix sockets.
#include <signal.h>

#include <atomic>
#include <future>
#include <thread>

#include "tests/integration/service_harness.h"

namespace specd::testing {
namespace {

const TestModels* g_models = nullptr;

class ServiceFaultTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_models = &SharedTestModels();
  }

  void StartService(bool unix_sockets = false) {
    ServiceOptions o;
    o.target_model = g_models->target;
    o.draft_model = g_models->draft;
    o.unix_sockets = unix_sockets;
    o.max_seq_len = 4096;
    svc_ = std::make_unique<Service>(dir_.path(), o);
    const absl::Status st = svc_->Start();
    ASSERT_TRUE(st.ok()) << st << "\n" << svc_->Logs();
  }
  void TearDown() override {
    if (HasFailure() && svc_) std::cerr << svc_->Logs() << "\n";
    svc_.reset();
  }

  std::vector<int32_t> Tokens(const std::string& text) {
    auto t = svc_->client->Tokenize(text, true, false);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : std::vector<int32_t>{};
  }

  // A long greedy request; `at_chunk` runs once when chunk number `n` arrives.
  absl::StatusOr<api::Summary> LongRequest(const std::string& prompt, int max_tokens, int n,
                                                      const std::function<void()>& at_chunk,
                                                      std::vector<api::Event>* chunks = nullptr) {
    api::Request p;
    p.prompt = prompt;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    p.k = 4;  // fixed: these tests exercise the draft's path (adaptive may rightly decline a poor draft)
    p.deadline = api::After(std::chrono::seconds(120));
    int seen = 0;
    return svc_->client->Generate(p, [&](const api::Event& ch) {
      if (++seen == n && at_chunk) at_chunk();
      if (chunks) chunks->push_back(ch);
      return true;
    });
  }

  TempDir dir_;
  std::unique_ptr<Service> svc_;
};

TEST_F(ServiceFaultTest, SwapDraftKeepsTheTargetAndInFlightOutput) {
  StartService();
  const client::Stats before = svc_->Stats();
  ASSERT_TRUE(before.target.reachable);
  const int64_t target_pid = before.target.pid;
  EXPECT_EQ(before.draft.model_name, "test-draft");

  const int n = 1500;
  const std::string prompt = "Once upon a time";
  const std::vector<int32_t> ref = ReferenceGreedy(g_models->target, Tokens(prompt), n);
  std::promise<absl::StatusOr<client::WorkerStats>> swapped;
  std::thread swapper;
  auto s = LongRequest(prompt, n, 3, [&] {
    swapper = std::thread([&] { swapped.set_value(svc_->client->SwapDraft(g_models->other)); });
  });
  ASSERT_TRUE(swapper.joinable()) << "the request ended before the swap started";
  swapper.join();
  auto sw = swapped.get_future().get();
  ASSERT_TRUE(sw.ok()) << sw.status();
  EXPECT_EQ(sw->model_name, "test-other-draft");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->tokens, ref) << "the in-flight request's output changed across the swap";

  const client::Stats after = svc_->Stats();
  EXPECT_EQ(after.target.pid, target_pid) << "the target process was restarted";
  EXPECT_EQ(after.draft_swaps, 1);
  EXPECT_EQ(after.draft.model_name, "test-other-draft");
  EXPECT_EQ(after.draft.model_loads, 2);
  EXPECT_NE(after.draft.exchange, before.draft.exchange) << "a swap re-exports the exchange buffer";

  // The new draft serves new requests, losslessly.
  ASSERT_TRUE(svc_->client->WaitServing(std::chrono::seconds(20), true).ok());
  api::Request p;
  p.prompt = prompt;
  p.max_tokens = 60;
  p.ignore_eos = true;
  p.k = 4;  // fixed: the unrelated draft rarely pays, so the adaptive default would rightly run target-only
  auto s2 = svc_->client->Generate(p);
  ASSERT_TRUE(s2.ok()) << s2.status();
  EXPECT_GT(s2->speculative_steps, 0);
  EXPECT_EQ(s2->tokens, std::vector<int32_t>(ref.begin(), ref.begin() + 60));
  // The summary carries the speculative steps' time apart (the draft's forwards are all theirs).
  EXPECT_GT(s2->step_time_speculative.draft_forward, 0);
  EXPECT_DOUBLE_EQ(s2->step_time_speculative.draft_forward, s2->step_time.draft_forward);
  EXPECT_LE(s2->step_time_speculative.verify_forward, s2->step_time.verify_forward);

  // A draft with another vocabulary is refused; the current one keeps serving.
  auto bad = svc_->client->SwapDraft(g_models->foreign);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition) << bad.status();
  EXPECT_NE(bad.status().message().find("vocabulary"), std::string::npos) << bad.status();
  auto missing = svc_->client->SwapDraft(dir_.File("no-such-model.gguf"));
  EXPECT_FALSE(missing.ok());
  const client::Stats kept = svc_->Stats();
  EXPECT_EQ(kept.draft.model_name, "test-other-draft");
  EXPECT_EQ(kept.draft_swaps, 1);
  EXPECT_EQ(kept.target.pid, target_pid);
  ASSERT_TRUE(svc_->client->WaitServing(std::chrono::seconds(20), true).ok());
  auto s3 = svc_->client->Generate(p);
  ASSERT_TRUE(s3.ok()) << s3.status();
  EXPECT_GT(s3->speculative_steps, 0);
  EXPECT_EQ(s3->tokens, s2->tokens);
  EXPECT_TRUE(svc_->WaitNoSequences());
}

TEST_F(ServiceFaultTest, DraftKilledRequestsContinueTargetOnlyThenReconnect) {
  StartService();
  const int n = 1500;
  const std::string prompt = "The quick brown fox";
  const std::vector<int32_t> ref = ReferenceGreedy(g_models->target, Tokens(prompt), n);
  const int64_t draft_pid = svc_->draft.pid();
  std::vector<api::Event> chunks;
  auto s = LongRequest(prompt, n, 5, [&] { svc_->draft.Kill(SIGKILL); }, &chunks);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->tokens, ref) << "output changed when the draft died";
  EXPECT_EQ(s->finish_reason, FinishReason::kLength);
  int target_only_after_kill = 0;
  for (size_t i = 5; i < chunks.size(); ++i) target_only_after_kill += !chunks[i].draft_used;
  EXPECT_GT(target_only_after_kill, 0);
  auto h = svc_->client->GetHealth();
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->serving);
  EXPECT_FALSE(h->draft_ready);

  // Requests still work without the draft.
  api::Request p;
  p.prompt = prompt;
  p.max_tokens = 30;
  p.ignore_eos = true;
  p.k = 4;  // fixed, so that speculation resumes as soon as the draft is back
  auto alone = svc_->client->Generate(p);
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_EQ(alone->speculative_steps, 0);
  EXPECT_EQ(alone->tokens, std::vector<int32_t>(ref.begin(), ref.begin() + 30));

  // The draft comes back on its address: the coordinator reconnects by itself.
  ASSERT_TRUE(svc_->StartDraft());
  ASSERT_TRUE(svc_->client->WaitServing(std::chrono::seconds(30), true).ok()) << svc_->Logs();
  const client::Stats st = svc_->Stats();
  EXPECT_GE(st.draft_reconnects, 1);
  EXPECT_NE(st.draft.pid, draft_pid);
  auto back = svc_->client->Generate(p);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_GT(back->speculative_steps, 0);
  EXPECT_EQ(back->tokens, alone->tokens);
  EXPECT_TRUE(svc_->WaitNoSequences());
}

TEST_F(ServiceFaultTest, TargetKilledInFlightIsUnavailableAndNewRequestsWait) {
  StartService();
  auto s = LongRequest("Hello world", 3000, 5, [&] { svc_->target.Kill(SIGKILL); });
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable) << s.status();
  EXPECT_NE(s.status().message().find("target"), std::string::npos) << s.status();

  // While the target is down, a request waits up to its deadline.
  api::Request p;
  p.prompt = "Hello world";
  p.max_tokens = 20;
  p.ignore_eos = true;
  p.deadline = api::After(std::chrono::milliseconds(1500));
  const auto t0 = std::chrono::steady_clock::now();
  auto waited = svc_->client->Generate(p);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(waited.ok());
  EXPECT_TRUE(waited.status().code() == absl::StatusCode::kDeadlineExceeded ||
              waited.status().code() == absl::StatusCode::kUnavailable)
      << waited.status();
  EXPECT_GT(secs, 1.0) << "the request should have waited for the target";

  // A request made while the target is down completes once it is back.
  p.deadline = api::After(std::chrono::seconds(60));
  auto pending = std::async(std::launch::async, [&] { return svc_->client->Generate(p); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_TRUE(svc_->StartTarget());
  auto done = pending.get();
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->completion_tokens, 20);
  EXPECT_EQ(done->tokens, ReferenceGreedy(g_models->target, Tokens("Hello world"), 20));
  // The new target process gets the draft's buffer again: speculation resumes.
  // (A fixed k: the adaptive default may rightly find that drafting does not
  // pay for these tiny models on a busy CPU and stay target-only.)
  ASSERT_TRUE(svc_->client->WaitServing(std::chrono::seconds(20), true).ok());
  p.k = 4;
  auto again = svc_->client->Generate(p);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_GT(again->speculative_steps, 0);
}

// Concurrent requests step in lockstep and send each step's calls to a
// worker as one message (coordinator/call_gatherer.h): a worker that dies
// under them fails every call of the message in flight. The draft: each
// request goes on target-only, output unchanged. The target: each request
// ends UNAVAILABLE, none hangs.
TEST_F(ServiceFaultTest, WorkersDyingUnderLockstepMessages) {
  StartService();
  const int n = 1500;
  const std::vector<std::string> prompts = {"The quick brown fox", "Hello world", "import numpy as np"};
  std::vector<std::vector<int32_t>> refs;
  for (const std::string& p : prompts) refs.push_back(ReferenceGreedy(g_models->target, Tokens(p), n));
  auto run_all = [&](int tokens, const std::function<void()>& kill) {
    std::vector<std::future<absl::StatusOr<api::Summary>>> f;
    for (size_t i = 0; i < prompts.size(); ++i)
      f.push_back(std::async(std::launch::async, [&, i] {
        return LongRequest(prompts[i], tokens, 40, i == 0 ? kill : std::function<void()>());
      }));
    std::vector<absl::StatusOr<api::Summary>> out;
    for (auto& x : f) out.push_back(x.get());
    return out;
  };
  auto drafts = run_all(n, [&] { svc_->draft.Kill(SIGKILL); });
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(drafts[i].ok()) << drafts[i].status();
    EXPECT_EQ(drafts[i]->tokens, refs[i]) << "output changed when the draft died: " << prompts[i];
  }
  const client::Stats st = svc_->Stats();
  EXPECT_NE(st.lockstep.find("; messages: target "), std::string::npos) << st.lockstep;
  EXPECT_EQ(st.lockstep.find("draft no messages yet"), std::string::npos) << st.lockstep;

  const auto t0 = std::chrono::steady_clock::now();
  auto targets = run_all(3000, [&] { svc_->target.Kill(SIGKILL); });
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_FALSE(targets[i].ok()) << prompts[i];
    EXPECT_EQ(targets[i].status().code(), absl::StatusCode::kUnavailable) << targets[i].status();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));
}

TEST_F(ServiceFaultTest, ServesOverUnixSockets) {
  StartService(/*unix_sockets=*/true);
  api::Request p;
  p.prompt = "import numpy as np";
  p.max_tokens = 24;
  p.ignore_eos = true;
  p.k = 4;  // fixed: the draft's path must run (adaptive may decline it on a busy CPU)
  auto s = svc_->client->Generate(p);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->tokens, ReferenceGreedy(g_models->target, Tokens("import numpy as np"), 24));
  EXPECT_GT(s->speculative_steps, 0);
}

}  // namespace
}  // namespace specd::testing
