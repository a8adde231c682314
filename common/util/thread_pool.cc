#include "common/util/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>


namespace specd {
namespace {

// Spin-wait step. Deliberately no PAUSE: under KVM a vCPU that executes PAUSE
// in a loop triggers pause-loop exiting, and the host deschedules it as a lock
// waiter (measured on a 2-vCPU VM: 16 us per ParallelFor with condition
// variables, 160-490 us with PAUSE spinning, see docs/PERFORMANCE.md).
inline void CpuRelax() { std::atomic_signal_fence(std::memory_order_seq_cst); }

// Busy polls before a waiter starts yielding its CPU on each poll: when the
// machine is oversubscribed the thread it waits for may share its CPU.
constexpr int kPureSpins = 256;

inline int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

ThreadPool::ThreadPool(int num_threads, int64_t spin_us) : spin_ns_(std::max<int64_t>(spin_us, 0) * 1000) {
  if (num_threads <= 0) num_threads = std::max(1u, std::thread::hardware_concurrency());
  chunks_.assign(num_threads, {0, 0});
  for (int i = 0; i + 1 < num_threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_.store(true);
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin for the next job, then sleep.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    if (gen == seen && spin_ns_ > 0) {
      const int64_t until = NowNs() + spin_ns_;
      for (int i = 1;; ++i) {
        if (i > kPureSpins) std::this_thread::yield();
        else CpuRelax();
        gen = generation_.load(std::memory_order_acquire);
        if (gen != seen || stop_.load(std::memory_order_relaxed)) break;
        if ((i & 15) == 0 && NowNs() > until) break;
      }
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> l(mu_);
      sleepers_.fetch_add(1);  // seq_cst: pairs with the caller's check in ParallelFor
      cv_start_.wait(l, [&] { return stop_.load() || generation_.load() != seen; });
      sleepers_.fetch_sub(1);
      gen = generation_.load(std::memory_order_acquire);
    }
    if (stop_.load()) return;
    seen = gen;
    const auto chunk = chunks_[index + 1];
    if (chunk.first < chunk.second) (*job_)(chunk.first, chunk.second);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
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
  const int64_t per = units / nt, extra = units % nt;
  int64_t u = 0;
  for (int t = 0; t < size(); ++t) {
    const int64_t cnt = t < nt ? per + (t < extra ? 1 : 0) : 0;
    chunks_[t] = {std::min(n, u * grain), std::min(n, (u + cnt) * grain)};
    u += cnt;
  }
  job_ = &fn;
  pending_.store(size() - 1, std::memory_order_relaxed);
  generation_.fetch_add(1);  // seq_cst: publishes the job (release) and orders the sleepers_ load below
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> l(mu_);  // a worker between its check and its wait holds mu_
  }
  if (sleepers_.load() > 0) cv_start_.notify_all();
  if (chunks_[0].first < chunks_[0].second) fn(chunks_[0].first, chunks_[0].second);
  for (int i = 1; pending_.load(std::memory_order_acquire) != 0; ++i) {
    if (i > kPureSpins) std::this_thread::yield();
    else CpuRelax();
  }
  job_ = nullptr;
}

}  // namespace specd
