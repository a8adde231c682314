// The workers' scheduler (common/engine/scheduler.h) with fake batch and
// prefill functions: batches form from concurrent jobs, a long prefill is fed
// in chunks between batches, prefills share the chunk round-robin, errors
// and cancellation end a prefill.
#include <atomic>
#include <mutex>
#include <string>
#include <thread>

#include "common/engine/scheduler.h"
#include "gtest/gtest.h"

namespace specd {
namespace {

struct Job {
  int64_t seq = 0;
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

std::unique_ptr<Thread> MakeThread(Recorder* rec, SchedulerOptions o,
                                   std::chrono::milliseconds batch_cost = std::chrono::milliseconds(0),
                                   std::chrono::milliseconds slice_cost = std::chrono::milliseconds(0)) {
  return std::make_unique<Thread>(
      [rec, batch_cost](const std::vector<Job>& jobs) {
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
      });
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

TEST(Scheduler, LongPrefillIsChunkedBetweenBatches) {
  Recorder rec;
  rec.pending[1] = 1000;
  SchedulerOptions o;
  o.prefill_chunk = 100;
  auto t = MakeThread(&rec, o, std::chrono::milliseconds(1), std::chrono::milliseconds(5));
  std::atomic<bool> done{false};
  std::thread pre([&] {
    EXPECT_TRUE(t->Prefill(1, 1000).ok());
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
  EXPECT_GE(steps_during, 5) << "batches ran between the prefill's chunks";
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

TEST(Scheduler, PrefillsShareTheChunkRoundRobin) {
  Recorder rec;
  rec.pending[1] = 1000;
  rec.pending[2] = 30;
  SchedulerOptions o;
  o.prefill_chunk = 100;
  auto t = MakeThread(&rec, o, std::chrono::milliseconds(0), std::chrono::milliseconds(2));
  std::thread a([&] { EXPECT_TRUE(t->Prefill(1, 1000).ok()); });
  // Let the long one start, then a short one arrives.
  while (t->prefill_rounds() < 2) std::this_thread::sleep_for(std::chrono::microseconds(100));
  const int64_t round_before = t->prefill_rounds();
  EXPECT_TRUE(t->Prefill(2, 30).ok());
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
  EXPECT_EQ(t->Prefill(-1, 10).code(), absl::StatusCode::kResourceExhausted);
  std::atomic<int> polls{0};
  const absl::Status st = t->Prefill(3, 500, [&] { return ++polls > 3; });
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled) << st;
  EXPECT_GT(rec.pending[3], 0);
  EXPECT_TRUE(t->Prefill(4, 0).ok());  // nothing to do
  // Exclusive tasks still run in order.
  EXPECT_EQ(t->Run([] { return 5; }), 5);
}

TEST(Scheduler, BatchWaitKeepsLockstepSequencesTogether) {
  Recorder rec;
  SchedulerOptions o;
  o.max_batch = 8;
  o.batch_wait = std::chrono::milliseconds(50);
  auto t = MakeThread(&rec, o, std::chrono::milliseconds(1));
  // Four sequences step together, arriving a few ms apart each round.
  for (int round = 0; round < 5; ++round) {
    std::vector<std::thread> ts;
    for (int i = 0; i < 4; ++i) {
      ts.emplace_back([&, i] {
        std::this_thread::sleep_for(std::chrono::milliseconds(3 * i));
        EXPECT_TRUE(t->Submit(Job{i}).ok());
      });
    }
    for (auto& th : ts) th.join();
  }
  // After two rounds the batch waits for all four.
  EXPECT_LE(t->batches(), 9);
  EXPECT_EQ(t->max_batch_seen(), 4);
}

}  // namespace
}  // namespace specd
