// Gathers the calls that a lockstep cohort (common/spec/cohort.h) sends to
// one worker at the same point of a step into one message (ProposeBatch,
// VerifyBatch): one RPC per step and worker instead of one per sequence, so
// the worker gets the whole cohort at once and its replies leave together
// (six streams' separate calls reached the worker spread over more than a
// forward's worth of time, round 16).
//
// A group is keyed by the cohort and the point of the step (`phase`: a
// verify sent with its proposal, or after it). It leaves when its
// CohortTag::gathered() calls are in, or `wait` after its first call (a
// member whose plan changed or whose request ended does not come); a call
// whose group already left goes alone. The worker's engine thread still
// gathers the cohort by its tag, so a straggler joins the same forward.
#pragma once
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_format.h"
#include "common/spec/cohort.h"
#include "common/spec/proposer.h"
#include "proto/rpc/status.h"

namespace specd {

// What a gatherer sent (for stats).
struct GatherFigures {
  int64_t messages = 0;     // batch messages sent
  int64_t calls = 0;        // calls they carried
  int64_t short_sends = 0;  // groups that left at `wait` before all their calls came
  // "120 messages, 5.90 calls each, 2 left short"
  std::string ToString() const {
    if (messages == 0) return "no messages yet";
    return absl::StrFormat("%d messages, %.2f calls each, %d left short", messages,
                           static_cast<double>(calls) / static_cast<double>(messages), short_sends);
  }
};

template <typename Req, typename Resp>
class CallGatherer {
 public:
  // One sequence's call: its request, then (once done) its outcome.
  struct Call {
    Req req;
    Resp resp;
    grpc::Status status;
    Deadline deadline = kNoDeadline;  // the call's own
    bool done = false;                // under the gatherer's mutex
  };
  using CallPtr = std::shared_ptr<Call>;
  // Sends `calls` as one message without blocking; when the reply (or the
  // failure) is in, fills each call's status and resp and runs `done`.
  using SendFn = std::function<void(std::vector<CallPtr> calls, std::function<void()> done)>;

  CallGatherer(SendFn send, std::chrono::microseconds wait) : send_(std::move(send)), wait_(wait) {
    timer_ = std::thread([this] { TimerLoop(); });
  }
  // Sends the groups still open and waits for every message in flight.
  ~CallGatherer() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    timer_cv_.notify_all();
    timer_.join();
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return inflight_ == 0; });
  }
  CallGatherer(const CallGatherer&) = delete;
  CallGatherer& operator=(const CallGatherer&) = delete;

  // Adds a call of cohort `tag` (shared) at point `phase` of the step; the
  // group leaves with the call that completes it.
  CallPtr Add(const CohortTag& tag, int phase, Req req, Deadline deadline) {
    auto c = std::make_shared<Call>();
    c->req = std::move(req);
    c->deadline = deadline;
    std::vector<CallPtr> ready;
    {
      std::lock_guard<std::mutex> l(mu_);
      const Key key{tag.id, phase};
      if (!tag.shared() || tag.gathered() <= 1 || sent_.count(key)) {
        ready.push_back(c);  // alone, or late: its group left
      } else {
        auto [it, fresh] = open_.try_emplace(key);
        if (fresh) {
          it->second.send_by = Clock::now() + wait_;
          timer_cv_.notify_one();
        }
        it->second.calls.push_back(c);
        if (static_cast<int>(it->second.calls.size()) >= tag.gathered()) {
          ready = std::move(it->second.calls);
          open_.erase(it);
          RememberSentLocked(key);
        }
      }
    }
    if (!ready.empty()) Send(std::move(ready), false);
    return c;
  }

  // Blocks until the call's outcome, or DEADLINE_EXCEEDED at its deadline
  // (the message may still be answered; the call is then forgotten).
  grpc::Status Wait(const CallPtr& c) {
    std::unique_lock<std::mutex> l(mu_);
    if (c->deadline == kNoDeadline) {
      cv_.wait(l, [&] { return c->done; });
    } else if (!cv_.wait_until(l, c->deadline, [&] { return c->done; })) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "the gathered call's deadline passed");
    }
    return c->status;
  }

  GatherFigures Figures() const {
    std::lock_guard<std::mutex> l(mu_);
    return fig_;
  }

 private:
  using Clock = std::chrono::steady_clock;
  using Key = std::pair<uint64_t, int>;
  struct Group {
    std::vector<CallPtr> calls;
    Clock::time_point send_by;
  };

  void Send(std::vector<CallPtr> calls, bool short_send) {
    {
      std::lock_guard<std::mutex> l(mu_);
      ++inflight_;
      ++fig_.messages;
      fig_.calls += static_cast<int64_t>(calls.size());
      fig_.short_sends += short_send ? 1 : 0;
    }
    std::vector<CallPtr> mine = calls;
    send_(std::move(calls), [this, mine = std::move(mine)] {
      {
        std::lock_guard<std::mutex> l(mu_);
        for (const CallPtr& c : mine) c->done = true;
        --inflight_;
      }
      cv_.notify_all();
    });
  }

  // Remembers the last 1024 groups that left (mu_ held).
  void RememberSentLocked(const Key& key) {
    if (!sent_.insert(key).second) return;
    sent_order_.push_back(key);
    if (sent_order_.size() > 1024) {
      sent_.erase(sent_order_.front());
      sent_order_.pop_front();
    }
  }

  // Sends the groups whose wait ran out (all of them when stopping).
  void TimerLoop() {
    std::unique_lock<std::mutex> l(mu_);
    while (true) {
      if (open_.empty()) {
        if (stop_) return;
        timer_cv_.wait(l);
        continue;
      }
      Clock::time_point first = Clock::time_point::max();
      for (const auto& [key, g] : open_) first = std::min(first, g.send_by);
      if (!stop_ && Clock::now() < first) {
        timer_cv_.wait_until(l, first);
        continue;
      }
      std::vector<std::vector<CallPtr>> due;
      const Clock::time_point now = Clock::now();
      for (auto it = open_.begin(); it != open_.end();) {
        if (stop_ || it->second.send_by <= now) {
          due.push_back(std::move(it->second.calls));
          RememberSentLocked(it->first);
          it = open_.erase(it);
        } else {
          ++it;
        }
      }
      l.unlock();
      for (auto& calls : due) Send(std::move(calls), true);
      l.lock();
    }
  }

  const SendFn send_;
  const std::chrono::microseconds wait_;
  mutable std::mutex mu_;
  std::condition_variable cv_;        // calls done, messages finished
  std::condition_variable timer_cv_;  // a new group, or stop
  std::map<Key, Group> open_;
  std::set<Key> sent_;
  std::deque<Key> sent_order_;
  int inflight_ = 0;
  bool stop_ = false;
  GatherFigures fig_;
  std::thread timer_;
};

// A SendFn over a batch RPC started by `start(ctx, request, response,
// callback)` (a stub's async() method; it runs the callback itself when it
// cannot start the call): the calls' requests go in one
// message whose deadline is the latest of theirs, and each call gets its
// own status and reply back (the RPC's status when it failed as a whole).
template <typename BatchReq, typename BatchResp, typename Req, typename Resp, typename StartFn>
typename CallGatherer<Req, Resp>::SendFn BatchSender(StartFn start) {
  using CallPtr = typename CallGatherer<Req, Resp>::CallPtr;
  return [start](std::vector<CallPtr> calls, std::function<void()> done) {
    struct Message {
      grpc::ClientContext ctx;
      BatchReq req;
      BatchResp resp;
    };
    auto m = std::make_shared<Message>();
    Deadline latest = calls.front()->deadline;
    for (const CallPtr& c : calls) {
      latest = std::max(latest, c->deadline);
      *m->req.add_calls() = c->req;
    }
    if (latest != kNoDeadline) m->ctx.set_deadline(latest);
    auto finish = [m, calls = std::move(calls), done = std::move(done)](const grpc::Status& gs) {
      for (size_t i = 0; i < calls.size(); ++i) {
        const int n = static_cast<int>(i);
        if (!gs.ok()) {
          calls[i]->status = gs;
        } else if (n >= m->resp.status_size() || n >= m->resp.replies_size()) {
          calls[i]->status = grpc::Status(grpc::StatusCode::INTERNAL, "the batch reply lost a call");
        } else {
          calls[i]->status = rpc::FromCallStatus(m->resp.status(n));
          calls[i]->resp = std::move(*m->resp.mutable_replies(n));
        }
      }
      done();
    };
    start(&m->ctx, &m->req, &m->resp, std::function<void(grpc::Status)>(std::move(finish)));
  };
}

}  // namespace specd
