// A fixed pool of worker threads for data-parallel loops (CPU backend kernels).
// ParallelFor splits [0, n) into contiguous chunks, one per thread, and blocks
// until all are done; the calling thread takes a chunk too. Chunking is static
// so results never depend on scheduling (kernels stay deterministic).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace specd {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);  // num_threads <= 0: hardware concurrency
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
  std::mutex mu_;
  std::mutex run_mu_;  // serializes ParallelFor calls from different threads
  std::condition_variable cv_start_, cv_done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  std::vector<std::pair<int64_t, int64_t>> chunks_;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace specd
