#include "coordinator/admission.h"

#include <algorithm>

namespace specd {

Admission::Slot& Admission::Slot::operator=(Slot&& o) noexcept {
  if (this != &o) {
    Release();
    a_ = o.a_;
    blocks_ = o.blocks_;
    queue_seconds_ = o.queue_seconds_;
    o.a_ = nullptr;
  }
  return *this;
}

void Admission::Slot::Release() {
  if (a_) a_->Leave(blocks_);
  a_ = nullptr;
}

bool Admission::FitsLocked(int64_t blocks, const Limits& l) const {
  if (running_ >= std::max(l.max_running, 1)) return false;
  // A request bigger than the whole pool is refused before it gets here;
  // when nothing runs, admit anyway rather than wait forever.
  return l.kv_blocks <= 0 || running_ == 0 || reserved_ + blocks <= l.kv_blocks;
}

absl::StatusOr<Admission::Slot> Admission::Acquire(int64_t blocks, const Limits& limits, Deadline deadline,
                                                    const std::function<bool()>& cancelled) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> l(mu_);
  if (!(queue_.empty() && FitsLocked(blocks, limits)) && static_cast<int>(queue_.size()) >= limits.max_queue) {
    ++rejected_;
    return absl::ResourceExhaustedError(absl::StrCat(
        "server busy: ", running_, " requests running and ", queue_.size(), " queued (--max-queue ", limits.max_queue,
        "); retry later"));
  }
  const uint64_t ticket = next_ticket_++;
  queue_.push_back(ticket);
  while (!(queue_.front() == ticket && FitsLocked(blocks, limits))) {
    const bool cancel = cancelled && cancelled();
    if (cancel || std::chrono::system_clock::now() >= deadline) {
      queue_.erase(std::find(queue_.begin(), queue_.end(), ticket));
      l.unlock();
      cv_.notify_all();  // the head may have changed
      if (cancel) return absl::CancelledError("cancelled by the client while queued");
      return absl::DeadlineExceededError(absl::StrCat(
          "the deadline passed after ",
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
          " s in the admission queue (all running slots or KV blocks stayed busy)"));
    }
    // Wake up now and then to poll `cancelled`.
    cv_.wait_until(l, std::min(deadline, std::chrono::system_clock::now() + std::chrono::milliseconds(100)));
  }
  queue_.pop_front();
  if (running_++ == 0) busy_since_ = std::chrono::steady_clock::now();
  ++admitted_;
  reserved_ += blocks;
  l.unlock();
  cv_.notify_all();  // the next in line may fit too
  Slot s;
  s.a_ = this;
  s.blocks_ = blocks;
  s.queue_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

void Admission::Leave(int64_t blocks) {
  {
    std::lock_guard<std::mutex> l(mu_);
    reserved_ -= blocks;
    if (--running_ == 0)
      busy_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_).count();
  }
  cv_.notify_all();
}

int Admission::running() const {
  std::lock_guard<std::mutex> l(mu_);
  return running_;
}

int64_t Admission::admitted() const {
  std::lock_guard<std::mutex> l(mu_);
  return admitted_;
}

int Admission::queued() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int>(queue_.size());
}

int64_t Admission::reserved_blocks() const {
  std::lock_guard<std::mutex> l(mu_);
  return reserved_;
}

int64_t Admission::rejected() const {
  std::lock_guard<std::mutex> l(mu_);
  return rejected_;
}

double Admission::busy_seconds() const {
  std::lock_guard<std::mutex> l(mu_);
  double b = busy_;
  if (running_ > 0) b += std::chrono::duration<double>(std::chrono::steady_clock::now() - busy_since_).count();
  return b;
}

}  // namespace specd
