// A fixed pool of worker threads for data-parallel loops (CPU backend kernels).
// ParallelFor splits [0, n) into contiguous chunks, one per thread, and blocks
// until all are done; the calling thread takes a chunk too. Chunking is static
// so results never depend on scheduling (kernels stay deterministic).
//
// A forward pass issues ~10 ParallelFor calls per layer, each a few to a few
// hundred microseconds long, so waking sleeping workers through a condition
// variable every time (~10-50 us per wake-up on a VM) would cost as much as
// the work. Workers therefore spin on an atomic generation counter for a while
// after each job (spin_us, 0.2 ms by default: the engines' --cpu-spin-us; 0
// sleeps at once) and only then sleep on the condition variable; the caller spins
// (then yields) for the others to finish. An idle pool sleeps.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace specd {

class ThreadPool {
 public:
  static constexpr int64_t kDefaultSpinUs = 200;
  // num_threads <= 0: hardware concurrency; spin_us: how long a worker polls for the next job before sleeping.
  explicit ThreadPool(int num_threads, int64_t spin_us = kDefaultSpinUs);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // fn(begin, end) over disjoint chunks covering [0, n). Chunks are multiples of
  // `grain` (except the last) so callers can keep blocks aligned.
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

 private:
  void WorkerLoop(int index);

  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // serializes ParallelFor calls from different threads
  // Job hand-off: the caller writes job_/chunks_, then bumps generation_
  // (release); a worker that sees the new generation (acquire) reads them.
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  std::vector<std::pair<int64_t, int64_t>> chunks_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  // Sleeping workers (after their spin ran out) wait here.
  std::mutex mu_;
  std::condition_variable cv_start_;
  std::atomic<int> sleepers_{0};
  int64_t spin_ns_;
};

}  // namespace specd
