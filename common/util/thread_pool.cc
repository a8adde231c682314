#include "common/util/thread_pool.h"

#include <algorithm>

namespace specd {

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 0; i + 1 < num_threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    std::pair<int64_t, int64_t> chunk;
    const std::function<void(int64_t, int64_t)>* job;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_start_.wait(l, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      chunk = chunks_[index + 1];
      job = job_;
    }
    if (chunk.first < chunk.second) (*job)(chunk.first, chunk.second);
    {
      std::lock_guard<std::mutex> l(mu_);
      if (--pending_ == 0) cv_done_.notify_one();
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t units = (n + grain - 1) / grain;
  const int nt = static_cast<int>(std::min<int64_t>(size(), units));
  if (nt <= 1) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> run(run_mu_);
  {
    std::lock_guard<std::mutex> l(mu_);
    chunks_.assign(size(), {0, 0});
    const int64_t per = units / nt, extra = units % nt;
    int64_t u = 0;
    for (int t = 0; t < nt; ++t) {
      const int64_t cnt = per + (t < extra ? 1 : 0);
      chunks_[t] = {std::min(n, u * grain), std::min(n, (u + cnt) * grain)};
      u += cnt;
    }
    job_ = &fn;
    pending_ = size() - 1;
    ++generation_;
  }
  cv_start_.notify_all();
  if (chunks_[0].first < chunks_[0].second) fn(chunks_[0].first, chunks_[0].second);
  std::unique_lock<std::mutex> l(mu_);
  cv_done_.wait(l, [&] { return pending_ == 0; });
  job_ = nullptr;
}

}  // namespace specd
