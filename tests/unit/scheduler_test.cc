// The workers' scheduler (common/engine/scheduler.h) with fake batch and
// prefill functions: batches form from concurrent jobs, a long prefill is fed
// in chunks between batches, prefills share the chunk round-robin, errors
// and cancellation end a prefill, a lockstep cohort's jobs form one batch.
#include <atomic>
#include <future>
#include <mutex>
#include <string>
#include <thread>

#include "common/engine/scheduler.h"
#include "gtest/gtest.h"

namespace specd {
namespace {

struct Job {
  int64_t seq = 0;
  CohortTag cohort;
};

// Records what the engine thread did, in order: "B<n>" a batch of n jobs,
// "P<key>:<tokens>" a prefill slice.
struct Recorder {
  std::mutex mu;
  std::vector<std::string> log;
  std::map<int64_t, int64_t> pending;  // prefill tokens left per key
  void Add(const std::string& s) {
    std::lock_guard<std::mutex> l(mu);
    log.push_back(s);
  }
};

using Thread = EngineThread<Job, int64_t>;

// A prefill's opening task that has `n` tokens to feed.
std::function<absl::StatusOr<int64_t>()> Tokens(int64_t n) {
  return [n]() -> absl::StatusOr<int64_t> { return n; };
}

// `before_batch` (optional) runs on the engine thread as each batch starts.
std::unique_ptr<Thread> MakeThread(Recorder* rec, SchedulerOptions o,
                                   std::chrono::milliseconds batch_cost = std::chrono::milliseconds(0),
                                   std::chrono::milliseconds slice_cost = std::chrono::milliseconds(0),
                                   std::function<void()> before_batch = {}) {
  return std::make_unique<Thread>(
      [rec, batch_cost, before_batch](const std::vector<Job>& jobs) {
        if (before_batch) before_batch();
        std::this_thread::sleep_for(batch_cost);
        rec->Add("B" + std::to_string(jobs.size()));
        std::vector<absl::StatusOr<int64_t>> out;
        for (const Job& j : jobs) out.push_back(j.seq);
        return out;
      },
      [](const Job& j) { return j.seq; }, o,
      [rec, slice_cost](const std::vector<PrefillRequest>& reqs) {
        std::this_thread::sleep_for(slice_cost);
        std::vector<absl::StatusOr<int64_t>> out;
        std::lock_guard<std::mutex> l(rec->mu);
        for (const PrefillRequest& r : reqs) {
          rec->log.push_back("P" + std::to_string(r.key) + ":" + std::to_string(r.tokens));
          if (r.key < 0) {
            out.push_back(absl::ResourceExhaustedError("no KV left"));
            continue;
          }
          int64_t& left = rec->pending[r.key];
          left -= std::min(left, r.tokens);
          out.push_back(left);
        }
        return out;
      },
      [](const Job& j) { return j.cohort; });
}

TEST(Scheduler, ConcurrentJobsShareABatch) {
  Recorder rec;
  SchedulerOptions o;
  o.max_batch = 8;
  auto t = MakeThread(&rec, o, std::chrono::milliseconds(20));
  std::vector<std::thread> ts;
  for (int i = 0; i < 6; ++i) ts.emplace_back([&, i] { EXPECT_EQ(*t->Submit(Job{i}), i); });
  for (auto& th : ts) th.join();
  // The first job starts a batch alone; the others arrive during it.
  EXPECT_LE(t->batches(), 3);
  EXPECT_EQ(t->batched_jobs(), 6);
  EXPECT_GE(t->max_batch_seen(), 2);
  // Two jobs of one sequence never share a batch.
  std::vector<std::thread> same;
  const int64_t before = t->batches();
  for (int i = 0; i < 3; ++i) same.emplace_back([&] { EXPECT_TRUE(t->Submit(Job{42}).ok()); });
  for (auto& th : same) th.join();
  EXPECT_EQ(t->batches() - before, 3);
}

// A batch message's calls handed over at once form one batch, however slow
// the thread (no batch wait, no cohort), with each result in its job's place.
TEST(Scheduler, JobsSubmittedTogetherFormOneBatch) {
  Recorder rec;
  auto t = MakeThread(&rec, SchedulerOptions{}, std::chrono::milliseconds(5));
  std::vector<Job> jobs;
  for (int64_t seq : {7, 3, 5, 1}) jobs.push_back(Job{seq});
  std::vector<absl::StatusOr<int64_t>> res = t->SubmitAll(std::move(jobs));
  ASSERT_EQ(res.size(), 4u);
  EXPECT_EQ(*res[0], 7);
  EXPECT_EQ(*res[1], 3);
  EXPECT_EQ(*res[2], 5);
  EXPECT_EQ(*res[3], 1);
  EXPECT_EQ(rec.log, (std::vector<std::string>{"B4"}));
  EXPECT_TRUE(t->SubmitAll({}).empty());
}

TEST(Scheduler, LongPrefillIsChunkedBetweenBatches) {
  Recorder rec;
  rec.pending[1] = 1000;
  SchedulerOptions o;
  o.prefill_chunk = 100;
  auto t = MakeThread(&rec, o, std::chrono::milliseconds(1), std::chrono::milliseconds(10));
  std::atomic<bool> done{false};
  std::thread pre([&] {
    EXPECT_TRUE(t->Prefill(1, Tokens(1000)).ok());
    done = true;
  });
  // A running sequence keeps stepping while the prompt goes in.
  int steps_during = 0;
  while (!done) {
    ASSERT_TRUE(t->Submit(Job{7}).ok());
    if (!done) ++steps_during;
  }
  pre.join();
  EXPECT_EQ(rec.pending[1], 0);
  EXPECT_EQ(t->prefill_tokens(), 1000);
  EXPECT_EQ(t->prefill_rounds(), 10);
  // (About 10 when the submitting thread keeps up; a loaded 2-core machine ran 4 with chunks of 5 ms.)
  EXPECT_GE(steps_during, 3) << "batches ran between the prefill's chunks";
  // A slice that ran while a gathered job waited is counted with its time
  // (each slice sleeps 10 ms).
  EXPECT_GE(t->prefill_ahead_rounds(), 1);
  EXPECT_LE(t->prefill_ahead_rounds(), t->prefill_rounds());
  EXPECT_GE(t->prefill_ahead_seconds(), 0.009 * static_cast<double>(t->prefill_ahead_rounds()));
  // Never more than one chunk in a row while a job waits.
  int slices = 0;
  for (const std::string& s : rec.log) {
    if (s[0] == 'P') {
      EXPECT_EQ(s, "P1:100");
      ++slices;
    }
  }
  EXPECT_EQ(slices, 10);
}

// A prompt's prefill starts in the round of the task that opens its sequence:
// handed over after that task it would wait out the round's batch (a step of
// every running sequence) first. The thread is held in a batch while another
// job and an opening are queued; the next round runs the opening ("O"), its
// first slice ("P") and only then the batch ("B"): the old order was O, B, P.
TEST(Scheduler, APrefillStartsInTheRoundThatOpensIt) {
  Recorder rec;
  SchedulerOptions o;
  o.prefill_chunk = 100;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> holding{false};
  auto t = MakeThread(&rec, o, std::chrono::milliseconds(0), std::chrono::milliseconds(0), [&] {
    if (!holding.exchange(true)) released.wait();  // the first batch holds the thread
  });
  std::thread first([&] { EXPECT_TRUE(t->Submit(Job{7}).ok()); });
  while (!holding) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::thread next([&] { EXPECT_TRUE(t->Submit(Job{8}).ok()); });
  std::thread open([&] {
    const absl::Status st = t->Prefill(1, [&rec]() -> absl::StatusOr<int64_t> {
      std::lock_guard<std::mutex> l(rec.mu);
      rec.pending[1] = 150;
      rec.log.push_back("O1");
      return 150;
    });
    EXPECT_TRUE(st.ok()) << st;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // both queued long before
  release.set_value();
  first.join();
  next.join();
  open.join();
  {
    std::lock_guard<std::mutex> l(rec.mu);
    EXPECT_EQ(rec.log, (std::vector<std::string>{"B1", "O1", "P1:100", "B1", "P1:50"}));
  }
  EXPECT_EQ(t->prefill_tokens(), 150);
  // An opening that fails ends the call with its error and prefills nothing.
  EXPECT_EQ(t->Prefill(9, [] { return absl::StatusOr<int64_t>(absl::FailedPreconditionError("no model")); }).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(t->prefill_tokens(), 150);
  std::lock_guard<std::mutex> l(rec.mu);
  for (const std::string& e : rec.log) EXPECT_NE(e.rfind("P9", 0), 0u) << "the failed opening prefilled";
}

// A job's wait behind prefill slices is measured and reported (the step
// anatomy's "others' prefill"): none when no prompt is going in, at least
// the running slice's rest while one is.
TEST(Scheduler, AJobsWaitBehindPrefillSlicesIsReported) {
  std::atomic<int> slices{0};
  int64_t left = 300;  // the prompt's tokens still to go in (engine thread only)
  Thread t(
      [](const std::vector<Job>& jobs) {
        std::vector<absl::StatusOr<int64_t>> out;
        for (const Job& j : jobs) out.push_back(j.seq);
        return out;
      },
      [](const Job& j) { return j.seq; }, SchedulerOptions{.prefill_chunk = 100},
      [&](const std::vector<PrefillRequest>& reqs) {
        slices.fetch_add(1);  // the slice is running
        std::this_thread::sleep_for(std::chrono::milliseconds(40));
        left -= std::min(left, reqs.front().tokens);
        return std::vector<absl::StatusOr<int64_t>>{left};
      });
  double behind = -1;
  ASSERT_TRUE(t.Submit(Job{7}, &behind).ok());
  EXPECT_EQ(behind, 0.0);
  std::thread pre([&] { EXPECT_TRUE(t.Prefill(1, Tokens(300)).ok()); });
  while (slices.load() == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
  // Handed over inside the first slice: they wait at least for its rest.
  std::vector<double> behinds;
  const auto res = t.SubmitAll({Job{8}, Job{9}}, &behinds);
  pre.join();
  ASSERT_EQ(res.size(), 2u);
  ASSERT_EQ(behinds.size(), 2u);
  for (double b : behinds) {
    EXPECT_GT(b, 0.0) << "the jobs came while a slice ran";
    EXPECT_LT(b, 5.0);
  }
  EXPECT_EQ(behinds[0], behinds[1]);  // handed over together, one batch
  ASSERT_TRUE(t.Submit(Job{7}, &behind).ok());
  EXPECT_EQ(behind, 0.0) << "the prompt is in: nothing to wait behind";
}

TEST(Scheduler, PrefillsShareTheChunkRoundRobin) {
  Recorder rec;
  rec.pending[1] = 1000;
  rec.pending[2] = 30;
  SchedulerOptions o;
  o.prefill_chunk = 100;
  auto t = MakeThread(&rec, o, std::chrono::milliseconds(0), std::chrono::milliseconds(2));
  std::thread a([&] { EXPECT_TRUE(t->Prefill(1, Tokens(1000)).ok()); });
  // Let the long one start, then a short one arrives.
  while (t->prefill_rounds() < 2) std::this_thread::sleep_for(std::chrono::microseconds(100));
  const int64_t round_before = t->prefill_rounds();
  EXPECT_TRUE(t->Prefill(2, Tokens(30)).ok());
  const int64_t waited = t->prefill_rounds() - round_before;
  a.join();
  EXPECT_LE(waited, 3) << "the short prompt is not stuck behind the long one";
  EXPECT_EQ(rec.pending[2], 0);
  EXPECT_EQ(rec.pending[1], 0);
  EXPECT_EQ(t->prefill_tokens(), 1030);
}

TEST(Scheduler, PrefillErrorsAndCancellationEndIt) {
  Recorder rec;
  rec.pending[3] = 500;
  SchedulerOptions o;
  o.prefill_chunk = 50;
  auto t = MakeThread(&rec, o);
  EXPECT_EQ(t->Prefill(-1, Tokens(10)).code(), absl::StatusCode::kResourceExhausted);
  std::atomic<int> polls{0};
  const absl::Status st = t->Prefill(3, Tokens(500), [&] { return ++polls > 3; });
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  EXPECT_GT(rec.pending[3], 0);
  EXPECT_TRUE(t->Prefill(4, Tokens(0)).ok());  // nothing to do
  // Exclusive tasks still run in order.
  EXPECT_EQ(t->Run([] { return 5; }), 5);
}

// Submits `n` jobs of cohort {id, size} (id 0: none) from threads, `gap` apart; returns when all ran.
void SubmitCohort(Thread* t, uint64_t id, int size, int n, std::chrono::milliseconds gap, int64_t first_seq = 0) {
  std::vector<std::thread> ts;
  for (int i = 0; i < n; ++i) {
    ts.emplace_back([=] {
      std::this_thread::sleep_for(gap * i);
      EXPECT_TRUE(t->Submit(Job{first_seq + i, CohortTag{id, size}}).ok());
    });
  }
  for (auto& th : ts) th.join();
}

TEST(Scheduler, BatchWaitKeepsLockstepSequencesTogether) {
  Recorder rec;
  SchedulerOptions o;
  o.max_batch = 8;
  o.batch_wait = std::chrono::milliseconds(50);
  auto t = MakeThread(&rec, o, std::chrono::milliseconds(1));
  // Four sequences step together (no cohort said), arriving a few ms apart each round.
  for (int round = 0; round < 5; ++round) SubmitCohort(t.get(), 0, 0, 4, std::chrono::milliseconds(3));
  // After two rounds the batch waits for all four.
  EXPECT_LE(t->batches(), 9);
  EXPECT_EQ(t->max_batch_seen(), 4);
}

TEST(Scheduler, CohortJobsArrivingApartFormOneBatch) {
  Recorder rec;
  SchedulerOptions o;
  o.cohort_wait = std::chrono::seconds(2);  // never reached: the cohort completes first
  auto t = MakeThread(&rec, o);
  // No history needed (the first round already), whatever the spread.
  SubmitCohort(t.get(), 11, 4, 4, std::chrono::milliseconds(15));
  SubmitCohort(t.get(), 12, 3, 3, std::chrono::milliseconds(25));
  EXPECT_EQ(rec.log, (std::vector<std::string>{"B4", "B3"}));
  EXPECT_EQ(t->cohort_batches(), 2);
  EXPECT_EQ(t->cohort_timeouts(), 0);
  // A cohort of one (or none) never waits.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(t->Submit(Job{9, CohortTag{13, 1}}).ok());
  EXPECT_TRUE(t->Submit(Job{9}).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
}

TEST(Scheduler, TheHandOffIsTakenApart) {
  Recorder rec;
  SchedulerOptions o;
  o.cohort_wait = std::chrono::seconds(2);  // never reached: the cohort completes first
  auto t = MakeThread(&rec, o, std::chrono::milliseconds(5));
  // Four calls 30 ms apart form one batch: they waited 90 + 60 + 30 + 0 ms for its last one.
  SubmitCohort(t.get(), 31, 4, 4, std::chrono::milliseconds(30));
  EXPECT_EQ(rec.log, (std::vector<std::string>{"B4"}));
  EXPECT_EQ(t->batched_jobs(), 4);
  EXPECT_GE(t->handoff_gather_seconds(), 0.15);
  EXPECT_LT(t->handoff_gather_seconds(), 1.0);
  // The rest is the engine thread waking and the handlers running again: far less than that.
  EXPECT_GE(t->handoff_start_seconds(), 0.0);
  EXPECT_GE(t->handoff_back_seconds(), 0.0);
  EXPECT_LT(t->handoff_start_seconds() + t->handoff_back_seconds(), t->handoff_gather_seconds());
  // A call alone gathers nothing.
  const double gathered = t->handoff_gather_seconds();
  EXPECT_TRUE(t->Submit(Job{7}).ok());
  EXPECT_EQ(t->batched_jobs(), 5);
  EXPECT_EQ(t->handoff_gather_seconds(), gathered);
}

TEST(Scheduler, CohortWaitIsBoundedAndALateJobRunsAtOnce) {
  Recorder rec;
  SchedulerOptions o;
  o.cohort_wait = std::chrono::milliseconds(300);
  auto t = MakeThread(&rec, o);
  // Three announced, two come (the third member dropped out after the gate).
  auto t0 = std::chrono::steady_clock::now();
  SubmitCohort(t.get(), 21, 3, 2, std::chrono::milliseconds(0));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(290));
  EXPECT_EQ(t->cohort_timeouts(), 1);
  // It comes after all: the rest of its cohort already ran, nothing to wait for.
  t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(t->Submit(Job{2, CohortTag{21, 3}}).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(150));
  EXPECT_EQ(rec.log, (std::vector<std::string>{"B2", "B1"}));
  EXPECT_EQ(t->cohort_timeouts(), 1);
}

TEST(Scheduler, ACohortLargerThanABatchFillsBatches) {
  Recorder rec;
  SchedulerOptions o;
  o.max_batch = 4;
  o.cohort_wait = std::chrono::seconds(2);
  auto t = MakeThread(&rec, o, std::chrono::milliseconds(20));
  SubmitCohort(t.get(), 31, 6, 6, std::chrono::milliseconds(5));
  // The first batch starts once a batch's worth is in; the rest follow without a timeout.
  ASSERT_EQ(rec.log.size(), 2u);
  EXPECT_EQ(rec.log[0], "B4");
  EXPECT_EQ(rec.log[1], "B2");
  EXPECT_EQ(t->cohort_timeouts(), 0);
}

}  // namespace
}  // namespace specd
