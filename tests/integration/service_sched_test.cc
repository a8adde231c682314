// Scheduling through the three real processes on loopback: chunked prefill
// keeps a short request streaming while a long prompt goes in, admission
// (--max-batch, --max-queue, --max-seq-len) queues, refuses and clamps, and
// the operator's view (Admin.Stats, GET /metrics, the per-request log line)
// reports occupancy, the k histogram and the memory ledger. Outputs stay
// lossless throughout. Every wait is bounded.

#include <atomic>
#include <fstream>
#include <future>
#include <random>
#include <thread>

#include "tests/integration/service_harness.h"

namespace specd::testing {
namespace {

using Clock = std::chrono::steady_clock;

const TestModels* g_models = nullptr;

class ServiceSchedTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_models = &SharedTestModels();
  }
  void TearDown() override {
    if (HasFailure() && svc_) std::cerr << svc_->Logs() << "\n";
  }

  void StartService(std::vector<std::string> coordinator_flags, std::vector<std::string> worker_flags = {}) {
    ServiceOptions o;
    o.target_model = g_models->target;
    o.draft_model = g_models->draft;
    o.max_seq_len = 4096;
    o.coordinator_flags = std::move(coordinator_flags);
    o.worker_flags = std::move(worker_flags);
    svc_ = std::make_unique<Service>(dir_.path(), o);
    const absl::Status st = svc_->Start();
    ASSERT_TRUE(st.ok()) << st << "\n" << svc_->Logs();
  }
  client::Client& c() { return *svc_->client; }

  // Polls Stats until `pred` holds (bounded).
  bool WaitStats(const std::function<bool(const client::Stats&)>& pred,
                 std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    const auto end = Clock::now() + timeout;
    while (Clock::now() < end) {
      auto s = c().GetStats();
      if (s.ok() && pred(*s)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  std::string CoordinatorLog() const {
    std::ifstream f(dir_.File("coordinator.log"));
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
  // Lines of the coordinator's log that hold `what`.
  int CountInLog(const std::string& what) const {
    const std::string text = CoordinatorLog();
    int n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }
  // Polls the coordinator's log until `what` shows `n` times (bounded).
  bool WaitInLog(const std::string& what, int n = 1) const {
    const auto end = Clock::now() + std::chrono::seconds(60);
    while (CountInLog(what) < n && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return CountInLog(what) >= n;
  }

  TempDir dir_;
  std::unique_ptr<Service> svc_;
};

std::vector<int32_t> RandomPrompt(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (auto& t : p) t = static_cast<int32_t>(rng() % 256 + 3);
  return p;
}

// --warmup always (the CPU backend prepares no shapes, so auto skips it):
// once both workers are up, the coordinator runs every speculation length's
// step through them, as a request would, and leaves nothing behind: no
// sequence, no request counted, and the next request is the target's greedy
// output; a draft swap gets one warm-up of its own.
TEST_F(ServiceSchedTest, WarmUpRunsEveryStepShapeThroughTheWorkers) {
  StartService({"--warmup", "always", "--draft-max", "3"});
  const std::string want = "draft=yes ran=\"2 requests of a 512-token prompt, 24 steps, lengths 0..3";
  const std::string kept = "costs=kept";  // it ran alone: its step times seed the requests' table
  ASSERT_TRUE(WaitInLog(want)) << svc_->Logs();
  const std::string log = CoordinatorLog();
  EXPECT_NE(log.find(kept, log.find(want)), std::string::npos) << log;
  ASSERT_TRUE(svc_->WaitNoSequences()) << svc_->Logs();
  const client::Stats s = svc_->Stats();
  EXPECT_EQ(s.requests_total, 0);
  EXPECT_GE(s.target.prefill_tokens, 512);
  EXPECT_GE(s.draft.prefill_tokens, 512);

  api::Request p;
  p.prompt = "Hello world";
  p.max_tokens = 16;
  p.ignore_eos = true;
  p.deadline = api::After(std::chrono::seconds(60));
  const auto ids = c().Tokenize(p.prompt);
  ASSERT_TRUE(ids.ok()) << ids.status();
  const auto sum = c().Generate(p);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(sum->tokens, ReferenceGreedy(g_models->target, *ids, 16));

  // A swapped draft gets a warm-up of its own (the target's too, with it), once.
  const int before = CountInLog(want);
  ASSERT_TRUE(c().SwapDraft(g_models->other).ok());
  EXPECT_TRUE(WaitInLog(want, before + 1)) << svc_->Logs();
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // three more rounds of the warm-up thread
  EXPECT_EQ(CountInLog(want), before + 1) << "the same draft and target are warmed once";
  const auto after = c().Generate(p);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->tokens, sum->tokens);
}

// A warm-up that runs while a request runs (here a draft swap's, beside a
// request whose client stops reading) shares the device with it: its step
// times are dropped, not kept in the table the requests share (round 40),
// and it runs again once no request runs, to measure them alone.
TEST_F(ServiceSchedTest, WarmUpBesideARequestDropsItsCostsThenMeasuresThemWhenIdle) {
  StartService({"--warmup", "always", "--draft-max", "3"});
  const std::string done = "warm-up: every step shape run";
  ASSERT_TRUE(WaitInLog("draft=yes")) << svc_->Logs();  // the start's warm-up with the draft, alone
  const int before = CountInLog(done);

  std::promise<void> started, release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> first{true};
  std::thread req([&] {
    api::Request p;
    p.prompt = "Hello world";
    p.max_tokens = 2000;
    p.ignore_eos = true;
    // Top alternatives with every token: ~1 KB a step, so the unread stream fills its flow-control
    // window within ~100 steps and the request stays running, however fast the models are.
    p.sampling.logprobs = 20;
    p.deadline = api::After(std::chrono::seconds(60));
    (void)c().Generate(p, [&](const api::Event&) {
      if (first.exchange(false)) started.set_value();
      released.wait();
      return false;  // cancel: the request ends once the warm-up has run beside it
    });
  });
  started.get_future().wait();
  ASSERT_TRUE(c().SwapDraft(g_models->other).ok()) << svc_->Logs();
  const bool warmed = WaitInLog(done, before + 1);
  const auto during = c().GetStats();  // the request still running: its stream is unread
  release.set_value();
  req.join();
  ASSERT_TRUE(warmed) << svc_->Logs();
  ASSERT_TRUE(during.ok()) << during.status();
  EXPECT_EQ(during->requests_running, 1);
  // The swap's warm-up (line before + 1) dropped its costs; once the request is gone it runs again, alone.
  auto line = [&](int n) {  // the n-th warm-up line (1-based)
    const std::string log = CoordinatorLog();
    size_t at = std::string::npos;
    for (int i = 0; i < n; ++i) at = log.find(done, at == std::string::npos ? 0 : at + 1);
    return at == std::string::npos ? std::string() : log.substr(at, log.find('\n', at) - at);
  };
  EXPECT_NE(line(before + 1).find("costs=\"dropped (requests ran beside it; again when idle)\""), std::string::npos)
      << line(before + 1);
  ASSERT_TRUE(WaitInLog(done, before + 2)) << svc_->Logs();
  EXPECT_NE(line(before + 2).find("draft=yes"), std::string::npos) << line(before + 2);
  EXPECT_NE(line(before + 2).find("costs=kept"), std::string::npos) << line(before + 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // three more rounds of the warm-up thread
  EXPECT_EQ(CountInLog(done), before + 2) << "kept: no more re-runs";
}

TEST_F(ServiceSchedTest, LongPromptDoesNotStallAShortRequest) {
  StartService({}, {"--prefill-chunk", "32"});
  const std::vector<int32_t> long_prompt = RandomPrompt(3500, 11);
  const std::vector<int32_t> long_ref = ReferenceGreedy(g_models->target, long_prompt, 8);
  auto short_prompt = c().Tokenize("Hello world");
  ASSERT_TRUE(short_prompt.ok());
  const std::vector<int32_t> short_ref = ReferenceGreedy(g_models->target, *short_prompt, 3000);

  // The short request streams; once it is going, the long one arrives.
  std::mutex mu;
  std::vector<Clock::time_point> short_times;
  std::promise<void> going;
  std::atomic<bool> stop{false};
  std::thread short_thread;
  absl::StatusOr<api::Summary> short_sum = absl::UnknownError("not run");
  short_thread = std::thread([&] {
    api::Request p;
    p.prompt = "Hello world";
    p.max_tokens = 3000;
    p.ignore_eos = true;
    p.deadline = api::After(std::chrono::seconds(120));
    int n = 0;
    short_sum = c().Generate(p, [&](const api::Event&) {
      {
        std::lock_guard<std::mutex> l(mu);
        short_times.push_back(Clock::now());
      }
      if (++n == 10) going.set_value();
      return !stop.load();
    });
  });
  ASSERT_EQ(going.get_future().wait_for(std::chrono::seconds(30)), std::future_status::ready);
  api::Request lp;
  lp.prompt_tokens = long_prompt;
  lp.max_tokens = 8;
  lp.ignore_eos = true;
  lp.deadline = api::After(std::chrono::seconds(120));
  const Clock::time_point t_start = Clock::now();
  Clock::time_point t_first{};
  auto long_sum = c().Generate(lp, [&](const api::Event&) {
    if (t_first == Clock::time_point{}) t_first = Clock::now();
    return true;
  });
  stop = true;
  short_thread.join();
  ASSERT_TRUE(long_sum.ok()) << long_sum.status();
  EXPECT_EQ(long_sum->tokens, long_ref) << "the long prompt's output";
  EXPECT_GT(long_sum->time_to_first_token_seconds, 0);
  // The short request either finished or was cancelled by us; its tokens are the reference's prefix.
  std::vector<int32_t> got;
  if (short_sum.ok()) {
    got = short_sum->tokens;
  } else {
    EXPECT_EQ(short_sum.status().code(), absl::StatusCode::kCancelled) << short_sum.status();
  }
  if (!got.empty()) {
    EXPECT_EQ(got, std::vector<int32_t>(short_ref.begin(), short_ref.begin() + static_cast<int64_t>(got.size())));
  }

  // While the long prompt was prefilled (its start to its first token), the
  // short request kept streaming, with no gap near the prefill's length.
  int during = 0;
  double max_gap = 0;
  {
    std::lock_guard<std::mutex> l(mu);
    for (size_t i = 0; i < short_times.size(); ++i) {
      if (short_times[i] <= t_start || short_times[i] >= t_first) continue;
      ++during;
      if (i > 0) max_gap = std::max(max_gap, std::chrono::duration<double>(short_times[i] - short_times[i - 1]).count());
    }
  }
  const double prefill_window = std::chrono::duration<double>(t_first - t_start).count();
  std::cerr << "long prompt: " << prefill_window * 1e3 << " ms to its first token; the short request streamed "
            << during << " steps meanwhile, longest gap " << max_gap * 1e3 << " ms\n";
  EXPECT_GE(during, 5) << "short-request steps during a " << prefill_window << " s prefill";
  EXPECT_LT(max_gap, 0.5 * prefill_window) << "a step of the short request waited for most of the prefill";
  const client::Stats st = svc_->Stats();
  EXPECT_GE(st.target.prefill_tokens, 3499);
  EXPECT_EQ(st.target.prefill_chunk, 32);
  // The short request's calls that waited behind the prompt's slices: the
  // step anatomy's "others' prefill", apart from the wait (the cancelled
  // request's figures reach the stats as its loop ends, soon after the stream).
  client::Stats after = st;
  for (int i = 0; i < 200 && after.step_time.prefill == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    after = svc_->Stats();
  }
  EXPECT_GT(after.step_time.prefill, 0);
  EXPECT_LE(after.step_time.prefill, prefill_window + 1.0);
  EXPECT_TRUE(svc_->WaitNoSequences());
}

TEST_F(ServiceSchedTest, AdmissionQueuesRefusesPastTheQueueAndClampsToTheContext) {
  StartService({"--max-batch", "1", "--max-queue", "1", "--max-seq-len", "3000"});
  // A runs (the only place), B queues (the only queue place), C is refused.
  std::atomic<bool> stop_a{false};
  std::atomic<bool> a_done{false};
  absl::StatusOr<api::Summary> a = absl::UnknownError("not run");
  std::thread ta([&] {
    api::Request p;
    p.prompt = "Once upon a time";
    p.max_tokens = 5000;  // clamped to the 3000-position context
    p.ignore_eos = true;
    p.deadline = api::After(std::chrono::seconds(120));
    a = c().Generate(p, [&](const api::Event&) { return !stop_a.load(); });
    a_done = true;
  });
  ASSERT_TRUE(WaitStats([](const client::Stats& s) { return s.requests_running == 1; }));
  absl::StatusOr<api::Summary> b = absl::UnknownError("not run");
  std::thread tb([&] {
    api::Request p;
    p.prompt = "The quick brown fox";
    p.max_tokens = 20;
    p.ignore_eos = true;
    p.deadline = api::After(std::chrono::seconds(120));
    b = c().Generate(p);
  });
  ASSERT_TRUE(WaitStats([](const client::Stats& s) { return s.queue_depth == 1; }));
  api::Request cp;
  cp.prompt = "Hello";
  cp.max_tokens = 4;
  const auto t0 = Clock::now();
  auto refused = c().Generate(cp);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5)) << "refused at once, not after a wait";
  ASSERT_FALSE(a_done.load()) << "A ended before C arrived: the test proves nothing";
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find("max-queue"), std::string::npos) << refused.status();
  stop_a = true;
  ta.join();
  tb.join();
  EXPECT_EQ(a.status().code(), absl::StatusCode::kCancelled) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_GT(b->queue_seconds, 0.0);
  EXPECT_GE(b->time_to_first_token_seconds, b->queue_seconds);
  auto b_prompt = c().Tokenize("The quick brown fox");
  ASSERT_TRUE(b_prompt.ok());
  EXPECT_EQ(b->tokens, ReferenceGreedy(g_models->target, *b_prompt, 20)) << "the queued request stays lossless";
  const client::Stats st = svc_->Stats();
  EXPECT_EQ(st.requests_rejected, 1);
  EXPECT_EQ(st.max_batch, 1);
  EXPECT_EQ(st.max_queue, 1);
  EXPECT_EQ(st.max_seq_len, 3000);
  EXPECT_EQ(st.queue_depth, 0);

  // The context: max_tokens is clamped to what the prompt leaves ...
  api::Request near;
  near.prompt_tokens = RandomPrompt(2990, 5);
  near.max_tokens = 100;
  near.ignore_eos = true;
  auto clamped = c().Generate(near);
  ASSERT_TRUE(clamped.ok()) << clamped.status();
  EXPECT_EQ(clamped->completion_tokens, 10);
  EXPECT_EQ(clamped->finish_reason, FinishReason::kLength);
  // ... and a prompt that leaves no room is INVALID_ARGUMENT.
  near.prompt_tokens = RandomPrompt(3000, 5);
  auto too_long = c().Generate(near);
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument) << too_long.status();
  EXPECT_NE(too_long.status().message().find("3000"), std::string::npos) << too_long.status();
  EXPECT_TRUE(svc_->WaitNoSequences());
}

// GET path from 127.0.0.1:port; the whole response (bounded by 5 s timeouts).
std::string HttpGet(int port, const std::string& path) {
  return LoopbackExchange(port, "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
}

// The value of the sample line starting with `series` + " " (-1: absent).
double Sample(const std::string& body, const std::string& series) {
  const std::string key = "\n" + series + " ";
  const size_t at = ("\n" + body).find(key);
  if (at == std::string::npos) return -1;
  return std::stod(body.substr(at + key.size() - 1));
}

TEST_F(ServiceSchedTest, StatsMetricsAndLogsShowTheService) {
  const int mport = FreeLoopbackPort();
  StartService({"--http-listen", "127.0.0.1:" + std::to_string(mport)}, {"--batch-wait-us", "2000"});
  // Concurrent requests: both workers see multi-sequence batches.
  const int nreq = 8;
  std::vector<absl::StatusOr<api::Summary>> res(nreq, absl::UnknownError("not run"));
  std::vector<std::thread> ts;
  const char* prompts[] = {"Hello world", "The quick brown fox", "Once upon a time", "import numpy as np"};
  for (int i = 0; i < nreq; ++i) {
    ts.emplace_back([&, i] {
      api::Request p;
      p.prompt = prompts[i % 4];
      p.max_tokens = 100;
      p.ignore_eos = true;
      if (i % 2) p.k = 4;
      p.deadline = api::After(std::chrono::seconds(120));
      res[static_cast<size_t>(i)] = c().Generate(p);
    });
  }
  for (auto& t : ts) t.join();
  int64_t tokens = 0, steps = 0;
  for (int i = 0; i < nreq; ++i) {
    ASSERT_TRUE(res[static_cast<size_t>(i)].ok()) << res[static_cast<size_t>(i)].status();
    auto prompt = c().Tokenize(prompts[i % 4]);
    ASSERT_TRUE(prompt.ok());
    EXPECT_EQ(res[static_cast<size_t>(i)]->tokens, ReferenceGreedy(g_models->target, *prompt, 100));
    tokens += res[static_cast<size_t>(i)]->completion_tokens;
    steps += res[static_cast<size_t>(i)]->steps;
  }
  const client::Stats s = svc_->Stats();
  EXPECT_EQ(s.requests_total, nreq);
  EXPECT_EQ(s.completion_tokens, tokens);
  EXPECT_GT(s.prompt_tokens, 0);
  EXPECT_EQ(s.steps, steps);
  int64_t hist_steps = 0;
  for (int64_t n : s.k_histogram) hist_steps += n;
  EXPECT_EQ(hist_steps, steps);
  EXPECT_GT(s.verify_batch_mean, 1.5) << "concurrent Verify calls share forwards";
  EXPECT_GT(s.draft_batch_mean, 1.2) << "concurrent Propose calls share forwards";
  EXPECT_NEAR(s.verify_batch_mean, s.target.BatchMean(), 1e-9);
  EXPECT_GT(s.throughput_tokens_per_second, 0);
  EXPECT_GT(s.busy_seconds, 0);
  EXPECT_EQ(s.recent.size(), static_cast<size_t>(nreq));
  for (const client::RequestRecord& r : s.recent) {
    EXPECT_EQ(r.completion_tokens, 100);
    EXPECT_EQ(r.finish_reason, "length");
    EXPECT_GT(r.tokens_per_second, 0);
    // The open (the prompt's prefill) comes before the first token.
    EXPECT_GT(r.open_seconds, 0);
    EXPECT_LT(r.open_seconds, r.time_to_first_token_seconds);
  }
  for (const client::WorkerStats* w : {&s.target, &s.draft}) {
    EXPECT_GT(w->memory_weights, 0u);
    EXPECT_GT(w->memory_kv, 0u);
    EXPECT_EQ(w->memory_weights + w->memory_kv + w->memory_activations + w->memory_exchange + w->memory_runtime +
                  w->memory_unplanned,
              w->memory_total);
    EXPECT_EQ(w->memory_shared, 0u) << "the cpu backend never maps another process's weights";
    EXPECT_NE(w->weight_sharing.find("own copy"), std::string::npos) << w->weight_sharing;
    EXPECT_GT(w->prefill_tokens, 0);
    EXPECT_GT(w->forward_tokens, w->prefill_tokens);
    EXPECT_EQ(w->cold_forwards, 0) << "the cpu backend prepares nothing per shape";
    // Every batched call's hand-off is counted, in parts that cannot be negative.
    EXPECT_GT(w->batched_requests, 0);
    EXPECT_GE(w->handoff_gather_seconds, 0);
    EXPECT_GE(w->handoff_start_seconds, 0);
    EXPECT_GE(w->handoff_back_seconds, 0);
  }
  EXPECT_GT(s.draft.memory_exchange, 0u);
  const std::string report = client::FormatStats(s);
  for (const char* want : {"k histogram", "sequences per verify", "memory: weights", "forwards (0 cold)",
                           "recent requests", "open ms", "queued", "lockstep: start: ", "lockstep cohorts",
                           "hand-off a call: gather "})
    EXPECT_NE(report.find(want), std::string::npos) << want << " missing from:\n" << report;
  // The speculative steps' time travels apart from the target-only steps'.
  ASSERT_FALSE(s.k_histogram.empty());
  EXPECT_EQ(s.speculative_steps, s.steps - s.k_histogram[0]);
  EXPECT_GT(s.step_time_speculative.draft_forward, 0);
  EXPECT_LE(s.step_time_speculative.verify_forward, s.step_time.verify_forward);
  {
    client::Stats f;  // 4 speculative steps of 20 ms and 6 target-only ones of 6.667 ms
    f.steps = 10;
    f.speculative_steps = 4;
    f.step_time.draft_forward = 0.02;
    f.step_time.verify_forward = 0.1;
    f.step_time_speculative.draft_forward = 0.02;
    f.step_time_speculative.verify_forward = 0.06;
    const std::string r = client::FormatStats(f);
    EXPECT_NE(r.find("speculative steps (4): per step: draft forwards 5.000 ms, verify forward 15.000 ms"),
              std::string::npos)
        << r;
    EXPECT_NE(r.find("target-only steps (6): per step: draft forwards 0.000 ms, verify forward 6.667 ms"),
              std::string::npos)
        << r;
  }

  // The Prometheus endpoint: the same figures, in the text format.
  const std::string resp = HttpGet(mport, "/metrics");
  ASSERT_EQ(resp.rfind("HTTP/1.1 200 OK", 0), 0u) << resp.substr(0, 200);
  const std::string body = resp.substr(resp.find("\r\n\r\n") + 4);
  EXPECT_NE(body.find("# TYPE specd_requests_total counter"), std::string::npos);
  EXPECT_NE(body.find("# TYPE specd_time_to_first_token_seconds histogram"), std::string::npos);
  EXPECT_EQ(Sample(body, "specd_requests_total{reason=\"length\"}"), nreq);
  EXPECT_EQ(Sample(body, "specd_completion_tokens_total"), static_cast<double>(tokens));
  EXPECT_EQ(Sample(body, "specd_drafts_per_step_count"), static_cast<double>(steps));
  EXPECT_EQ(Sample(body, "specd_time_to_first_token_seconds_count"), nreq);
  // The speculative steps' share of the step time, by part: all of the draft's forwards, part of the verify.
  EXPECT_GT(Sample(body, "specd_speculative_step_seconds_total{part=\"draft_forward\"}"), 0);
  EXPECT_DOUBLE_EQ(Sample(body, "specd_speculative_step_seconds_total{part=\"draft_forward\"}"),
                   Sample(body, "specd_step_seconds_total{part=\"draft_forward\"}"));
  EXPECT_LE(Sample(body, "specd_speculative_step_seconds_total{part=\"verify_forward\"}"),
            Sample(body, "specd_step_seconds_total{part=\"verify_forward\"}"));
  EXPECT_EQ(Sample(body, "specd_queue_depth"), 0);
  EXPECT_EQ(Sample(body, "specd_target_ready"), 1);
  EXPECT_EQ(Sample(body, "specd_worker_memory_bytes{role=\"target\",part=\"total\"}"),
            static_cast<double>(s.target.memory_total));
  EXPECT_GT(Sample(body, "specd_worker_batched_sequences_total{role=\"draft\"}"), 0);
  // Concurrent requests stepped in lockstep: openings released several at once.
  const double openings = Sample(body, "specd_lockstep_openings_total{barrier=\"start\"}");
  EXPECT_GT(openings, 0);
  EXPECT_GE(Sample(body, "specd_lockstep_released_total{barrier=\"start\"}"), 2 * openings);
  EXPECT_GE(Sample(body, "specd_lockstep_wait_seconds_total{barrier=\"verify\"}"), 0);
  // The workers gathered the openings' calls by the cohort each call carries.
  EXPECT_GT(Sample(body, "specd_worker_cohort_batches_total{role=\"target\"}"), 0);
  EXPECT_GT(Sample(body, "specd_worker_cohort_batches_total{role=\"draft\"}"), 0);
  EXPECT_GE(Sample(body, "specd_worker_cohort_timeouts_total{role=\"target\"}"), 0);
  EXPECT_GE(Sample(body, "specd_worker_prefill_ahead_seconds_total{role=\"target\"}"), 0);
  EXPECT_GE(Sample(body, "specd_worker_handoff_seconds_total{role=\"target\",phase=\"gather\"}"), 0);
  EXPECT_GE(Sample(body, "specd_worker_handoff_seconds_total{role=\"target\",phase=\"start\"}"), 0);
  EXPECT_GE(Sample(body, "specd_worker_handoff_seconds_total{role=\"target\",phase=\"back\"}"), 0);
  EXPECT_GT(s.target.cohort_batches, 0);
  // The coordinator sent the cohorts' calls as one message per worker.
  EXPECT_GT(Sample(body, "specd_batch_messages_total{role=\"target\"}"), 0);
  EXPECT_GE(Sample(body, "specd_batch_message_calls_total{role=\"target\"}"),
            2 * Sample(body, "specd_batch_messages_total{role=\"target\"}") - 1e-9);
  EXPECT_EQ(HttpGet(mport, "/nope").rfind("HTTP/1.1 404", 0), 0u);

  // One logfmt line per finished request.
  std::ifstream log(dir_.File("coordinator.log"));
  std::string line;
  int lines = 0;
  while (std::getline(log, line)) {
    if (line.find("msg=\"request finished\"") == std::string::npos) continue;
    ++lines;
    for (const char* key : {" id=", " reason=length", " tokens=100", " acceptance=", " tok_s=", " queue_wait_ms=",
                            " open_ms=", " ttft_ms=", " mean_k=", " transport_ms_per_step=", " wait_ms_per_step=",
                            " wait_draft_ms_per_step="})
      EXPECT_NE(line.find(key), std::string::npos) << key << " missing: " << line;
  }
  EXPECT_EQ(lines, nreq);
  EXPECT_TRUE(svc_->WaitNoSequences());
}

}  // namespace
}  // namespace specd::testing
