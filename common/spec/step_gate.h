// Keeps concurrent requests' speculative steps in phase, so that the workers
// batch them: one draft batch proposes for every stream, one target forward
// verifies them all.
//
// Each request runs its own loop (loop.h) and the workers batch whatever calls
// are pending when their engine thread comes round. Left alone, streams drift
// out of phase: while stream A's verify runs, B's propose runs, and so on, so
// six streams can cost six one-sequence verifies per step instead of one
// six-sequence verify (round 7, H200: ~66 ms against ~19 ms).
//
// A gate has two barriers per step:
//   Start   every member that is stepping (a cyclic barrier over the gate's
//           members): the step's proposals start together.
//   Verify  the members Start released together (their cohort): a member
//           that skipped the draft (target-only step, failed proposal) waits
//           for the cohort's proposals, so the verifies reach the target
//           together. A cohort where no member proposes does not wait here
//           (nothing to wait for: the target gathers its verifies).
// Verify only waits for members headed to it (each leaves its cohort when it
// verifies, starts the next step or leaves the gate), so the two barriers
// cannot wait on each other.
//
// A member that does not reach Start in time (its client reads slowly, it is
// catching the draft up, ...) holds the others back once: Start opens
// `wait_factor` x a member's usual time between steps after the first
// arrival (clamped to [min_wait, max_wait]), and the members that missed it
// count as late: they are not waited for until they arrive again. Verify
// waits at most `wait_factor` x the usual time a cohort takes to gather. One
// member alone never waits.
//
// The workers learn each opening's cohort from its calls (cohort.h): a
// member's verify carries the opening's id and member count, its proposal
// the id and the count of members that said at Start they would propose, so
// that each worker's engine thread batches exactly those calls however far
// apart the transport delivers them. The tags also count the calls sent at
// the same point of the step (CohortTag::together: the verifies sent with
// their proposals, and the others), which a coordinator gathers into one
// message.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/spec/cohort.h"

namespace specd {

struct StepGateOptions {
  double wait_factor = 2.0;
  std::chrono::microseconds min_wait{500};
  std::chrono::microseconds max_wait{100000};
};

// What one of a gate's barriers did (for stats and tests).
struct GateFigures {
  int64_t opened = 0;            // openings that released more than one member
  int64_t timed_out = 0;         // openings forced by the timeout (some member late)
  int64_t members_released = 0;  // members those openings released (mean: members_released / opened)
  double waited_seconds = 0;     // members' time waiting, summed
  // "12 steps, 3.00 members each, 1 timed out, 0.40 ms waited per member"
  // ("no shared steps yet" while no opening released two or more)
  std::string ToString() const;
};

struct StepGateFigures {
  GateFigures start, verify;
  std::string ToString() const;  // "start: ...; verify: ..."
};

class StepGate {
  struct Cohort;

 public:
  explicit StepGate(StepGateOptions opts = {});
  StepGate(const StepGate&) = delete;
  StepGate& operator=(const StepGate&) = delete;

  // One request's membership: joins on construction, leaves on destruction.
  // A null gate makes every call a no-op.
  class Member {
   public:
    explicit Member(StepGate* gate);
    ~Member();
    Member(const Member&) = delete;
    Member& operator=(const Member&) = delete;
    // What the step about to start does.
    enum class Step {
      kVerify,        // verifies only (target-only)
      kPropose,       // proposes through the draft worker, then verifies (counted in draft_cohort())
      kProposeWithVerify,  // as kPropose, its verify sent with the proposal (Verifier::VerifyNext)
      kProposeAside,  // proposes through a proposer that may not call the draft worker (n-gram, a
                      // chain), then verifies: not counted in draft_cohort()
      kAlone,         // slow (e.g. it first runs the draft's prefill): the others neither wait for it
                      // at Start nor verify with it, and it carries no cohort
    };
    // Block until the step may start / verify (see above); return the seconds waited.
    double Start(Step step = Step::kVerify);
    double Verify();
    // The cohort the last Start released this member in (a member alone,
    // or without a gate: no cohort): its verifies and its proposals.
    const CohortTag& target_cohort() const { return target_tag_; }
    const CohortTag& draft_cohort() const { return draft_tag_; }

   private:
    friend class StepGate;
    StepGate* gate_;
    std::chrono::steady_clock::time_point last_start_{};
    bool started_before_ = false;
    bool late_ = false;
    Step step_ = Step::kVerify;           // at the forming Start
    std::shared_ptr<Cohort> cohort_;      // released together at the last Start, until it verifies
    CohortTag target_tag_, draft_tag_;
  };

  StepGateFigures Figures() const;
  int members() const;
  int waiting() const;  // members waiting at Start now

 private:
  using Clock = std::chrono::steady_clock;
  struct Cohort {
    int expected = 0;  // members still headed to Verify
    int arrived = 0;
    bool proposing = false;  // some member proposes (else its Verify barrier never waits)
    bool open = false;
    Clock::time_point released{};
  };
  void Join(Member* m);
  void Leave(Member* m);
  double Start(Member* m, Member::Step step);
  double Verify(Member* m);
  void ObserveGatherLocked(const Cohort& c, Clock::time_point now);
  // Every member not late waits at the forming Start (mu_ held).
  bool AllArrivedLocked() const;
  // Opens the forming Start (mu_ held): its arrivals become a cohort.
  void OpenStartLocked();
  // `m` will not verify with its cohort (mu_ held).
  void DropFromCohortLocked(Member* m);
  void OpenCohortLocked(Cohort* c, bool timed_out);
  Clock::duration WaitFor(double typical_seconds) const;

  const StepGateOptions o_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Member*> members_;
  std::vector<Member*> arrivals_;  // at the forming Start
  int late_ = 0;                   // members that missed a Start and have not arrived since
  uint64_t gen_ = 0;               // Start openings
  const uint64_t id_base_;         // cohort ids: id_base_ + gen_ (random: unique across coordinators)
  Clock::time_point first_arrival_{};
  double step_ewma_ = -1;    // seconds from a member's Start to its next one
  double gather_ewma_ = -1;  // seconds from a cohort's release to its last Verify arrival
  StepGateFigures fig_;
};

}  // namespace specd
