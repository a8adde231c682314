// Admission control: how many requests run at once, against what share of
// the target's KV pool, and a bounded first-in-first-out queue for the rest.
//
// A request is admitted when it is at the head of the queue, fewer than
// `max_running` requests run, and the KV blocks it may need (prompt +
// max_tokens, capped by its context) fit next to those the running requests
// reserved; so an admitted request never runs out of KV mid-way. Strict FIFO:
// a large request at the head is not overtaken by smaller ones (no starvation).
// Past `max_queue` waiting requests, Acquire fails at once with
// RESOURCE_EXHAUSTED (backpressure: the client should retry later).
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>

#include "common/spec/loop.h"
#include "common/util/status.h"

namespace specd {

class Admission {
 public:
  struct Limits {
    int max_running = 1;
    int64_t kv_blocks = 0;  // 0: not limited
    int max_queue = 0;      // requests that may wait
  };

  // A running request's place; released when destroyed.
  class Slot {
   public:
    Slot() = default;
    Slot(Slot&& o) noexcept { *this = std::move(o); }
    Slot& operator=(Slot&& o) noexcept;
    ~Slot() { Release(); }
    void Release();
    double queue_seconds() const { return queue_seconds_; }

   private:
    friend class Admission;
    Admission* a_ = nullptr;
    int64_t blocks_ = 0;
    double queue_seconds_ = 0;
  };

  // Waits for a place. RESOURCE_EXHAUSTED when the queue is full,
  // DEADLINE_EXCEEDED at `deadline`, CANCELLED when `cancelled` (polled).
  absl::StatusOr<Slot> Acquire(int64_t blocks, const Limits& limits, Deadline deadline,
                               const std::function<bool()>& cancelled);

  int running() const;
  // Requests admitted so far (a warm-up's own slot included).
  int64_t admitted() const;
  int queued() const;
  int64_t reserved_blocks() const;
  int64_t rejected() const;
  // Time with at least one request running.
  double busy_seconds() const;

 private:
  void Leave(int64_t blocks);
  bool FitsLocked(int64_t blocks, const Limits& l) const;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<uint64_t> queue_;  // tickets, arrival order
  uint64_t next_ticket_ = 0;
  int running_ = 0;
  int64_t admitted_ = 0;
  int64_t reserved_ = 0;
  int64_t rejected_ = 0;
  double busy_ = 0;
  std::chrono::steady_clock::time_point busy_since_{};
};

}  // namespace specd
