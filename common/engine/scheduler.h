// The workers' scheduler, the engine layer's batching: one thread owns the
// engine (which is not thread-safe) and callers (gRPC handler threads) hand it
// work and wait.
//
//   Run(fn)      an exclusive task (Sync, Release, Info, a model load, the
//                registration part of Open), run in arrival order.
//   Submit(job)  a batchable job (Propose on the draft, Verify on the target);
//                SubmitAll(jobs) several at once (a batch message's calls).
//                Every job pending when the thread comes round goes into one
//                BatchFn call, i.e. one forward for all active requests; jobs
//                that arrive meanwhile form the next batch (continuous batching).
//   Prefill(key, start)  a prompt's prefill, opened by `start` (an exclusive
//                task) and fed in slices from that round on: each round gives
//                at most `prefill_chunk` tokens to the pending prefills (one
//                PrefillFn call, one forward), round-robin, so a long prompt
//                delays the running sequences' steps by one chunk per round
//                instead of its whole length (chunked prefill).
//
// One round: exclusive tasks, one prefill slice round, one batch. A batch holds
// at most one job per key (sequence): a second one for the same sequence
// waits for the next round.
//
// A job's wait behind prefill slices (other requests' prompts), measured
// from its hand-over to its batch's start, is reported to the caller
// (Submit's `behind_prefill`): the coordinator's step anatomy tells it from
// the rest of a call's wait. The rest is counted here, summed over the
// batched jobs (handoff_*, per job: over batched_jobs()): gather, from a job's hand-over to its batch's last job's;
// start, from that to the batch's start (the thread waking, exclusive tasks,
// work it was finishing; prefill slices since then left out); back, from the
// job's result to its caller running again.
//
// Gathering a batch, when no other work waits: jobs that carry a lockstep
// cohort (common/spec/cohort.h: the coordinator released them together and
// says how many there are) wait up to cohort_wait until every job of their
// cohort is pending (or already ran); the transport may deliver them well
// apart, and one forward for all is worth more than the wait. Jobs without
// a cohort (a client that does not say) wait up to batch_wait while fewer
// sequences have a job pending than were in the last two batches together,
// so that sequences split into two groups merge again; sequences that
// stopped stepping drop out of that count after two batches.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "common/spec/cohort.h"
#include "common/util/status.h"

namespace specd {

struct SchedulerOptions {
  int max_batch = 64;          // jobs per batch
  int64_t prefill_chunk = 512;  // prefill tokens per round (all pending prefills together; one default forward)
  std::chrono::microseconds batch_wait{0};
  std::chrono::microseconds cohort_wait{4000};
};

struct PrefillRequest {
  int64_t key = 0;
  int64_t tokens = 0;  // at most this many of its pending tokens now
};

template <typename Job, typename T>
class EngineThread {
 public:
  using Result = absl::StatusOr<T>;
  using BatchFn = std::function<std::vector<Result>(const std::vector<Job>&)>;
  using KeyFn = std::function<int64_t(const Job&)>;
  // Returns, per request, the tokens still pending after it (0: done) or an error.
  using PrefillFn = std::function<std::vector<absl::StatusOr<int64_t>>(const std::vector<PrefillRequest>&)>;
  // The job's lockstep cohort (none: CohortTag{}).
  using CohortFn = std::function<CohortTag(const Job&)>;

  EngineThread(BatchFn batch, KeyFn key, SchedulerOptions opts, PrefillFn prefill = {}, CohortFn cohort = {})
      : batch_(std::move(batch)),
        key_(std::move(key)),
        prefill_(std::move(prefill)),
        cohort_(std::move(cohort)),
        opts_(opts) {
    if (opts_.max_batch < 1) opts_.max_batch = 1;
    if (opts_.prefill_chunk < 1) opts_.prefill_chunk = 1;
    thread_ = std::thread([this] { Loop(); });
  }
  // Finishes all queued work, then joins.
  ~EngineThread() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  EngineThread(const EngineThread&) = delete;
  EngineThread& operator=(const EngineThread&) = delete;

  // behind_prefill (optional): the seconds the job waited behind prefill slices.
  Result Submit(Job job, double* behind_prefill = nullptr) {
    std::vector<Job> one;
    one.push_back(std::move(job));
    std::vector<double> behind;
    Result r = std::move(SubmitAll(std::move(one), behind_prefill ? &behind : nullptr).front());
    if (behind_prefill) *behind_prefill = behind.front();
    return r;
  }

  // Several jobs handed over at once (a cohort's calls in one message): the
  // thread sees all of them pending together. Results in the jobs' order.
  // behind_prefill (optional): per job, the seconds it waited behind prefill slices.
  std::vector<Result> SubmitAll(std::vector<Job> jobs, std::vector<double>* behind_prefill = nullptr) {
    std::vector<std::future<Result>> fs;
    fs.reserve(jobs.size());
    // Written by the engine thread before each job's result; read after all
    // of them (the futures order it).
    if (behind_prefill) behind_prefill->assign(jobs.size(), 0.0);
    std::vector<int64_t> done(jobs.size(), 0);  // likewise: when each result was set
    {
      std::lock_guard<std::mutex> l(mu_);
      const int64_t pf0 = PrefillNsLocked(), now = NowNs();
      for (size_t i = 0; i < jobs.size(); ++i) {
        auto p = std::make_unique<Pending>(
            Pending{std::move(jobs[i]), {}, pf0, behind_prefill ? &(*behind_prefill)[i] : nullptr, now, &done[i]});
        fs.push_back(p->done.get_future());
        jobs_.push_back(std::move(p));
      }
    }
    cv_.notify_one();
    std::vector<Result> out;
    out.reserve(fs.size());
    for (auto& f : fs) out.push_back(f.get());
    const int64_t back = NowNs();
    int64_t sum = 0;
    for (int64_t d : done) sum += d > 0 ? std::max<int64_t>(0, back - d) : 0;
    handoff_back_ns_.fetch_add(sum);
    return out;
  }

  template <typename F>
  std::invoke_result_t<F> Run(F&& fn) {
    using R = std::invoke_result_t<F>;
    auto task = std::make_shared<std::packaged_task<R()>>(std::forward<F>(fn));
    std::future<R> f = task->get_future();
    {
      std::lock_guard<std::mutex> l(mu_);
      tasks_.push_back([task] { (*task)(); });
    }
    cv_.notify_one();
    return f.get();
  }

  // A prompt's prefill (a sequence's Open): `start` runs as an exclusive task
  // (in order with Run's) and returns the tokens to prefill, which are fed in
  // slices from that same round on: a prefill handed over after its task ran
  // would wait out the round's batch first (a step of every running
  // sequence, on the time to first token). Blocks until they are in, `start`
  // or a slice fails, or `cancelled` (polled each round) says so.
  absl::Status Prefill(int64_t key, std::function<absl::StatusOr<int64_t>()> start,
                       std::function<bool()> cancelled = {}) {
    if (!prefill_) return absl::UnimplementedError("this scheduler has no prefill function");
    auto p = std::make_shared<PrefillJob>();
    p->key = key;
    p->cancelled = std::move(cancelled);
    std::future<absl::Status> f = p->done.get_future();
    {
      std::lock_guard<std::mutex> l(mu_);
      tasks_.push_back([this, p, start = std::move(start)] {
        const absl::StatusOr<int64_t> pending = start();
        if (!pending.ok()) return p->done.set_value(pending.status());
        if (*pending <= 0) return p->done.set_value(absl::OkStatus());
        p->remaining = *pending;
        prefills_.push_back(p);  // this round's slice round serves it
      });
    }
    cv_.notify_one();
    return f.get();
  }

  // True when the thread takes an exclusive task within `timeout` (a
  // liveness check that never blocks longer than that).
  bool Responsive(std::chrono::milliseconds timeout) {
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> f = done->get_future();
    {
      std::lock_guard<std::mutex> l(mu_);
      tasks_.push_back([done] { done->set_value(); });
    }
    cv_.notify_one();
    return f.wait_for(timeout) == std::future_status::ready;
  }

  int64_t batches() const { return batches_.load(); }
  int64_t batched_jobs() const { return batched_jobs_.load(); }
  int max_batch_seen() const { return max_seen_.load(); }
  int64_t prefill_tokens() const { return prefill_tokens_.load(); }
  int64_t prefill_rounds() const { return prefill_rounds_.load(); }
  // Batches that held jobs of a shared cohort; of those, batches that
  // started before all of a cohort's jobs came (cohort_wait ran out, or
  // other work needed the thread).
  int64_t cohort_batches() const { return cohort_batches_.load(); }
  int64_t cohort_timeouts() const { return cohort_timeouts_.load(); }
  // Prefill slice rounds that ran while a gathered batch waited for them, and
  // their time.
  int64_t prefill_ahead_rounds() const { return prefill_ahead_rounds_.load(); }
  double prefill_ahead_seconds() const { return static_cast<double>(prefill_ahead_ns_.load()) * 1e-9; }
  // The hand-off of batched jobs, seconds summed over them (see the top).
  double handoff_gather_seconds() const { return static_cast<double>(handoff_gather_ns_.load()) * 1e-9; }
  double handoff_start_seconds() const { return static_cast<double>(handoff_start_ns_.load()) * 1e-9; }
  double handoff_back_seconds() const { return static_cast<double>(handoff_back_ns_.load()) * 1e-9; }
  const SchedulerOptions& options() const { return opts_; }

 private:
  struct Pending {
    Job job;
    std::promise<Result> done;
    int64_t pf0 = 0;          // PrefillNsLocked() at its hand-over
    double* behind = nullptr;  // set before `done` (when asked): seconds behind prefill slices
    int64_t handed_ns = 0;     // NowNs() at its hand-over
    int64_t* done_ns = nullptr;  // set before `done`: NowNs() then
  };
  static int64_t NowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // Prefill slice time so far, the running slice's part included (mu_ held).
  int64_t PrefillNsLocked() const { return prefill_ns_ + (slice_start_ns_ > 0 ? NowNs() - slice_start_ns_ : 0); }
  struct PrefillJob {
    int64_t key = 0;
    int64_t remaining = 0;
    std::function<bool()> cancelled;
    std::promise<absl::Status> done;
  };

  void Loop() {
    std::set<int64_t> prev, prev2;  // keys of the last two batches
    while (true) {
      std::deque<std::function<void()>> tasks;
      std::vector<std::unique_ptr<Pending>> batch;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || !tasks_.empty() || !jobs_.empty() || !prefills_.empty(); });
        if (stop_ && tasks_.empty() && jobs_.empty() && prefills_.empty()) return;
        // Lockstep batching (see the top), unless other work waits.
        const bool idle_else = tasks_.empty() && prefills_.empty() && !jobs_.empty();
        const bool cohorts = HasCohortLocked();
        if (cohorts) {
          if (idle_else && opts_.cohort_wait.count() > 0 && !CohortsCompleteLocked()) {
            cv_.wait_for(l, opts_.cohort_wait, [&] {
              return stop_ || !tasks_.empty() || CohortsCompleteLocked();
            });
          }
        } else if (opts_.batch_wait.count() > 0 && idle_else) {
          std::set<int64_t> expect = prev;
          expect.insert(prev2.begin(), prev2.end());
          const int want = std::min(static_cast<int>(expect.size()), opts_.max_batch);
          auto pending_keys = [&] {
            std::set<int64_t> k;
            for (const auto& p : jobs_) k.insert(key_(p->job));
            return static_cast<int>(k.size());
          };
          if (pending_keys() < want) {
            cv_.wait_for(l, opts_.batch_wait,
                         [&] { return stop_ || !tasks_.empty() || pending_keys() >= want; });
          }
        }
        const bool cohort_incomplete = cohorts && !CohortsCompleteLocked();
        tasks.swap(tasks_);
        std::set<int64_t> keys;
        bool had_cohort = false;
        for (auto it = jobs_.begin(); it != jobs_.end() && static_cast<int>(batch.size()) < opts_.max_batch;) {
          if (keys.insert(key_((*it)->job)).second) {
            if (cohort_) {
              const CohortTag c = cohort_((*it)->job);
              if (c.shared()) {
                had_cohort = true;
                TakeLocked(c.id);
              }
            }
            batch.push_back(std::move(*it));
            it = jobs_.erase(it);
          } else {
            ++it;
          }
        }
        if (had_cohort) {
          cohort_batches_.fetch_add(1);
          if (cohort_incomplete) cohort_timeouts_.fetch_add(1);
        }
      }
      for (auto& t : tasks) t();
      // A prefill slice runs ahead of the batch just gathered: its jobs wait
      // for it (what the coordinator's step anatomy counts as wait).
      const int64_t slice_start = NowNs();
      if (PrefillRound() && !batch.empty()) {
        prefill_ahead_rounds_.fetch_add(1);
        prefill_ahead_ns_.fetch_add(NowNs() - slice_start);
      }
      if (batch.empty()) continue;
      // The hand-off (see the top): from the batch's last call, less the prefill slices since it came.
      const Pending* last = batch.front().get();
      for (const auto& p : batch)
        if (p->handed_ns > last->handed_ns) last = p.get();
      int64_t gather = 0;
      for (const auto& p : batch) gather += last->handed_ns - p->handed_ns;
      const int64_t started = std::max<int64_t>(0, NowNs() - last->handed_ns - (prefill_ns_ - last->pf0)) *
                              static_cast<int64_t>(batch.size());
      // (prefill_ns_ has one writer, this thread: read here without mu_.)
      for (auto& p : batch)
        if (p->behind) *p->behind = static_cast<double>(std::max<int64_t>(0, prefill_ns_ - p->pf0)) * 1e-9;
      std::vector<Job> jobs;
      jobs.reserve(batch.size());
      for (auto& p : batch) jobs.push_back(std::move(p->job));
      std::vector<Result> res = batch_(jobs);
      // Counted before the callers wake, so that what they read next includes it.
      batches_.fetch_add(1);
      batched_jobs_.fetch_add(static_cast<int64_t>(batch.size()));
      handoff_gather_ns_.fetch_add(gather);
      handoff_start_ns_.fetch_add(started);
      if (static_cast<int>(batch.size()) > max_seen_.load()) max_seen_.store(static_cast<int>(batch.size()));
      prev2.swap(prev);
      prev.clear();
      for (const Job& j : jobs) prev.insert(key_(j));
      for (size_t i = 0; i < batch.size(); ++i) {
        if (batch[i]->done_ns) *batch[i]->done_ns = NowNs();
        batch[i]->done.set_value(i < res.size() ? std::move(res[i]) : Result(absl::InternalError("batch lost a job")));
      }
    }
  }

  // Whether a pending job carries a shared cohort (mu_ held).
  bool HasCohortLocked() const {
    if (!cohort_) return false;
    for (const auto& p : jobs_)
      if (cohort_(p->job).shared()) return true;
    return false;
  }

  // Every shared cohort with a pending job has all its jobs still to run
  // pending, up to a batch's worth (mu_ held).
  bool CohortsCompleteLocked() const {
    if (static_cast<int>(jobs_.size()) >= opts_.max_batch) return true;
    std::unordered_map<uint64_t, std::pair<int, int>> pending;  // id -> (jobs pending, size)
    for (const auto& p : jobs_) {
      const CohortTag c = cohort_(p->job);
      if (!c.shared()) continue;
      auto& e = pending[c.id];
      ++e.first;
      e.second = std::max(e.second, c.size);
    }
    for (const auto& [id, e] : pending) {
      const auto t = taken_.find(id);
      const int left = e.second - (t == taken_.end() ? 0 : t->second);
      if (e.first < std::min(left, opts_.max_batch)) return false;
    }
    return true;
  }

  // Counts a job of cohort `id` into a batch; remembers the last 1024 cohorts (mu_ held).
  void TakeLocked(uint64_t id) {
    auto [it, fresh] = taken_.try_emplace(id, 0);
    ++it->second;
    if (!fresh) return;
    taken_order_.push_back(id);
    if (taken_order_.size() > 1024) {
      taken_.erase(taken_order_.front());
      taken_order_.pop_front();
    }
  }

  // One slice round over prefills_ (engine thread only): up to prefill_chunk
  // tokens, handed out from the front; the jobs served move to the back.
  // Whether it fed any.
  bool PrefillRound() {
    for (auto it = prefills_.begin(); it != prefills_.end();) {
      if ((*it)->cancelled && (*it)->cancelled()) {
        (*it)->done.set_value(absl::CancelledError("prefill cancelled"));
        it = prefills_.erase(it);
      } else {
        ++it;
      }
    }
    if (prefills_.empty()) return false;
    int64_t budget = opts_.prefill_chunk;
    std::vector<PrefillRequest> reqs;
    std::vector<std::shared_ptr<PrefillJob>> served;
    std::set<int64_t> keys;
    for (auto it = prefills_.begin(); it != prefills_.end() && budget > 0;) {
      if (!keys.insert((*it)->key).second) {
        ++it;
        continue;
      }
      const int64_t n = std::min((*it)->remaining, budget);
      budget -= n;
      reqs.push_back(PrefillRequest{(*it)->key, n});
      served.push_back(*it);
      it = prefills_.erase(it);
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      slice_start_ns_ = NowNs();
    }
    std::vector<absl::StatusOr<int64_t>> res = prefill_(reqs);
    {
      std::lock_guard<std::mutex> l(mu_);
      prefill_ns_ += NowNs() - slice_start_ns_;
      slice_start_ns_ = 0;
    }
    prefill_rounds_.fetch_add(1);
    for (size_t i = 0; i < served.size(); ++i) {
      if (i < res.size() && res[i].ok()) prefill_tokens_.fetch_add(reqs[i].tokens);
    }
    for (size_t i = 0; i < served.size(); ++i) {
      PrefillJob& j = *served[i];
      if (i >= res.size() || !res[i].ok()) {
        j.done.set_value(i < res.size() ? res[i].status() : absl::InternalError("prefill lost a slice"));
        continue;
      }
      if (*res[i] <= 0) {
        j.done.set_value(absl::OkStatus());
        continue;
      }
      j.remaining = *res[i];
      prefills_.push_back(served[i]);
    }
    return true;
  }

  BatchFn batch_;
  KeyFn key_;
  PrefillFn prefill_;
  CohortFn cohort_;
  SchedulerOptions opts_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::deque<std::unique_ptr<Pending>> jobs_;
  std::deque<std::shared_ptr<PrefillJob>> prefills_;  // engine thread only (read in the wait predicate there)
  bool stop_ = false;
  // Prefill slices' time so far and the running one's start (0: none): written
  // by the engine thread under mu_, read by submitters under mu_.
  int64_t prefill_ns_ = 0, slice_start_ns_ = 0;
  std::unordered_map<uint64_t, int> taken_;  // cohort id -> its jobs batched so far (mu_)
  std::deque<uint64_t> taken_order_;
  std::atomic<int64_t> batches_{0}, batched_jobs_{0}, prefill_tokens_{0}, prefill_rounds_{0};
  std::atomic<int64_t> cohort_batches_{0}, cohort_timeouts_{0};
  std::atomic<int64_t> prefill_ahead_rounds_{0}, prefill_ahead_ns_{0};
  std::atomic<int64_t> handoff_gather_ns_{0}, handoff_start_ns_{0}, handoff_back_ns_{0};
  std::atomic<int> max_seen_{0};
  std::thread thread_;
};

}  // namespace specd
