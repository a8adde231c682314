// The workers' scheduler: one thread owns the engine (which is not
// thread-safe) and gRPC handler threads hand it work and wait.
//
//   Run(fn)      an exclusive task (Open, Sync, Release, Info, a model load),
//                run in arrival order.
//   Submit(job)  a batchable job (Propose on the draft, Verify on the target).
//                Every job pending when the thread comes round goes into one
//                BatchFn call, i.e. one forward for all active requests; jobs
//                that arrive meanwhile form the next batch (continuous batching).
//
// A batch holds at most one job per key (sequence): a second one for the same
// sequence waits for the next round.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <type_traits>
#include <vector>

#include "common/util/status.h"

namespace specd::rpc {

template <typename Job, typename T>
class EngineThread {
 public:
  using Result = absl::StatusOr<T>;
  using BatchFn = std::function<std::vector<Result>(const std::vector<Job>&)>;
  using KeyFn = std::function<int64_t(const Job&)>;

  EngineThread(BatchFn batch, KeyFn key, int max_batch)
      : batch_(std::move(batch)), key_(std::move(key)), max_batch_(max_batch < 1 ? 1 : max_batch) {
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

  Result Submit(Job job) {
    auto p = std::make_unique<Pending>(Pending{std::move(job), {}});
    std::future<Result> f = p->done.get_future();
    {
      std::lock_guard<std::mutex> l(mu_);
      jobs_.push_back(std::move(p));
    }
    cv_.notify_one();
    return f.get();
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

  int64_t batches() const { return batches_.load(); }
  int64_t batched_jobs() const { return batched_jobs_.load(); }
  int max_batch_seen() const { return max_seen_.load(); }

 private:
  struct Pending {
    Job job;
    std::promise<Result> done;
  };

  void Loop() {
    while (true) {
      std::deque<std::function<void()>> tasks;
      std::vector<std::unique_ptr<Pending>> batch;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || !tasks_.empty() || !jobs_.empty(); });
        if (stop_ && tasks_.empty() && jobs_.empty()) return;
        tasks.swap(tasks_);
        std::set<int64_t> keys;
        for (auto it = jobs_.begin(); it != jobs_.end() && static_cast<int>(batch.size()) < max_batch_;) {
          if (keys.insert(key_((*it)->job)).second) {
            batch.push_back(std::move(*it));
            it = jobs_.erase(it);
          } else {
            ++it;
          }
        }
      }
      for (auto& t : tasks) t();
      if (batch.empty()) continue;
      std::vector<Job> jobs;
      jobs.reserve(batch.size());
      for (auto& p : batch) jobs.push_back(std::move(p->job));
      std::vector<Result> res = batch_(jobs);
      for (size_t i = 0; i < batch.size(); ++i) {
        batch[i]->done.set_value(i < res.size() ? std::move(res[i]) : Result(absl::InternalError("batch lost a job")));
      }
      batches_.fetch_add(1);
      batched_jobs_.fetch_add(static_cast<int64_t>(batch.size()));
      if (static_cast<int>(batch.size()) > max_seen_.load()) max_seen_.store(static_cast<int>(batch.size()));
    }
  }

  BatchFn batch_;
  KeyFn key_;
  const int max_batch_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::deque<std::unique_ptr<Pending>> jobs_;
  bool stop_ = false;
  std::atomic<int64_t> batches_{0}, batched_jobs_{0};
  std::atomic<int> max_seen_{0};
  std::thread thread_;
};

}  // namespace specd::rpc
