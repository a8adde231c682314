#include "common/spec/step_gate.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace specd {
namespace {

// A running mean weighting the newest sample 0.2 (the first sets it).
void Smooth(double* mean, double sample) { *mean = *mean < 0 ? sample : 0.8 * *mean + 0.2 * sample; }

}  // namespace

std::string GateFigures::ToString() const {
  if (opened == 0 && timed_out == 0) return "no shared steps yet";
  const double n = static_cast<double>(std::max<int64_t>(opened, 1));
  return absl::StrFormat("%d steps, %.2f members each, %d timed out, %.3f ms waited per member", opened,
                         static_cast<double>(members_released) / n, timed_out,
                         members_released ? 1e3 * waited_seconds / static_cast<double>(members_released) : 0.0);
}

std::string StepGateFigures::ToString() const {
  return absl::StrCat("start: ", start.ToString(), "; verify: ", verify.ToString());
}

StepGate::StepGate(StepGateOptions opts)
    : o_(opts), id_base_((static_cast<uint64_t>(std::random_device{}()) << 32) | (1ull << 31)) {}

StepGate::Member::Member(StepGate* gate) : gate_(gate) {
  if (gate_) gate_->Join(this);
}

StepGate::Member::~Member() {
  if (gate_) gate_->Leave(this);
}

double StepGate::Member::Start(Step step) { return gate_ ? gate_->Start(this, step) : 0.0; }
double StepGate::Member::Verify() { return gate_ ? gate_->Verify(this) : 0.0; }

void StepGate::Join(Member* m) {
  std::lock_guard<std::mutex> l(mu_);
  members_.push_back(m);
}

void StepGate::Leave(Member* m) {
  std::lock_guard<std::mutex> l(mu_);
  members_.erase(std::find(members_.begin(), members_.end(), m));
  if (m->late_) --late_;
  DropFromCohortLocked(m);
  // The members waiting at Start may now be all that is expected.
  if (!arrivals_.empty() && AllArrivedLocked()) OpenStartLocked();
}

bool StepGate::AllArrivedLocked() const {
  return static_cast<int>(arrivals_.size()) >= static_cast<int>(members_.size()) - late_;
}

StepGate::Clock::duration StepGate::WaitFor(double typical_seconds) const {
  const auto d = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(o_.wait_factor * std::max(typical_seconds, 0.0)));
  return std::clamp(d, std::chrono::duration_cast<Clock::duration>(o_.min_wait),
                    std::chrono::duration_cast<Clock::duration>(o_.max_wait));
}

void StepGate::OpenStartLocked() {
  const int n = static_cast<int>(arrivals_.size());
  if (n > 1) {
    ++fig_.start.opened;
    fig_.start.members_released += n;
  }
  auto cohort = std::make_shared<Cohort>();
  cohort->expected = n;
  cohort->released = Clock::now();
  ++gen_;
  using Step = Member::Step;
  // Its Propose goes to the draft worker (counted in draft_cohort()).
  auto to_draft = [](const Member* a) { return a->step_ == Step::kPropose || a->step_ == Step::kProposeWithVerify; };
  int proposers = 0, with_verify = 0;
  for (const Member* a : arrivals_) {
    proposers += to_draft(a) ? 1 : 0;
    with_verify += a->step_ == Step::kProposeWithVerify ? 1 : 0;
    cohort->proposing |= a->step_ != Step::kVerify;
  }
  const uint64_t id = id_base_ + gen_;
  for (Member* a : arrivals_) {
    a->cohort_ = cohort;
    // A member alone carries no cohort: its calls need not wait for others.
    const bool sends_with = a->step_ == Step::kProposeWithVerify;
    a->target_tag_ = n > 1 ? CohortTag{id, n, sends_with ? with_verify : n - with_verify} : CohortTag{};
    a->draft_tag_ = proposers > 1 && to_draft(a) ? CohortTag{id, proposers, proposers} : CohortTag{};
  }
  arrivals_.clear();
  cv_.notify_all();
}

void StepGate::ObserveGatherLocked(const Cohort& c, Clock::time_point now) {
  Smooth(&gather_ewma_, std::chrono::duration<double>(now - c.released).count());
}

void StepGate::OpenCohortLocked(Cohort* c, bool timed_out) {
  c->open = true;
  if (timed_out) ++fig_.verify.timed_out;
  if (c->arrived > 1) {
    ++fig_.verify.opened;
    fig_.verify.members_released += c->arrived;
  }
  cv_.notify_all();
}

void StepGate::DropFromCohortLocked(Member* m) {
  std::shared_ptr<Cohort> c = std::move(m->cohort_);
  if (!c || c->open) return;
  --c->expected;
  if (c->arrived > 0 && c->arrived >= c->expected) OpenCohortLocked(c.get(), false);
}

double StepGate::Start(Member* m, Member::Step step) {
  std::unique_lock<std::mutex> l(mu_);
  m->step_ = step;
  const Clock::time_point now = Clock::now();
  DropFromCohortLocked(m);  // it did not verify in its last step (it ended that step early)
  if (m->started_before_) Smooth(&step_ewma_, std::chrono::duration<double>(now - m->last_start_).count());
  if (step == Member::Step::kAlone) {  // not waited for until it arrives again, no cohort
    m->started_before_ = false;  // its slow step is not a sample of the usual time between steps
    m->target_tag_ = m->draft_tag_ = CohortTag{};
    if (!m->late_) {
      m->late_ = true;
      ++late_;
      if (!arrivals_.empty() && AllArrivedLocked()) OpenStartLocked();
    }
    return 0.0;
  }
  if (m->late_) {
    m->late_ = false;
    --late_;
  }
  const uint64_t gen = gen_;
  arrivals_.push_back(m);
  if (arrivals_.size() == 1) first_arrival_ = now;
  double waited = 0;
  if (AllArrivedLocked()) {
    OpenStartLocked();
  } else {
    if (!cv_.wait_until(l, first_arrival_ + WaitFor(step_ewma_), [&] { return gen_ != gen; })) {
      // Timed out: whoever has not arrived is late; open for those who have.
      ++fig_.start.timed_out;
      for (Member* o : members_) {
        if (!o->late_ && std::find(arrivals_.begin(), arrivals_.end(), o) == arrivals_.end()) {
          o->late_ = true;
          ++late_;
        }
      }
      OpenStartLocked();
    }
    waited = std::chrono::duration<double>(Clock::now() - now).count();
    fig_.start.waited_seconds += waited;
  }
  m->last_start_ = Clock::now();
  m->started_before_ = true;
  return waited;
}

double StepGate::Verify(Member* m) {
  std::unique_lock<std::mutex> l(mu_);
  std::shared_ptr<Cohort> c = std::move(m->cohort_);
  if (!c || !c->proposing) return 0.0;
  const Clock::time_point now = Clock::now();
  if (c->open) {  // late: the cohort went ahead; how long it took to gather still counts
    ObserveGatherLocked(*c, now);
    return 0.0;
  }
  ++c->arrived;
  if (c->arrived >= c->expected) {
    ObserveGatherLocked(*c, now);
    OpenCohortLocked(c.get(), false);
    return 0.0;
  }
  if (!cv_.wait_until(l, c->released + WaitFor(gather_ewma_), [&] { return c->open; }))
    OpenCohortLocked(c.get(), true);  // the rest verify alone when they come
  const double waited = std::chrono::duration<double>(Clock::now() - now).count();
  fig_.verify.waited_seconds += waited;
  return waited;
}

StepGateFigures StepGate::Figures() const {
  std::lock_guard<std::mutex> l(mu_);
  return fig_;
}

int StepGate::waiting() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int>(arrivals_.size());
}

int StepGate::members() const {
  std::lock_guard<std::mutex> l(mu_);
  return static_cast<int>(members_.size());
}

}  // namespace specd
