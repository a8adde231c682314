// A lockstep cohort as the workers see it: the calls of one step that the
// coordinator's step gate (step_gate.h) released together. Each call carries
// the cohort's id and how many calls of it go to that worker, so that the
// worker's engine thread (common/engine/scheduler.h) gathers exactly those
// into one forward instead of guessing from its last batches; a coordinator
// may also send the calls it sends together as one message (ProposeBatch,
// VerifyBatch).
#pragma once
#include <cstdint>

namespace specd {

struct CohortTag {
  uint64_t id = 0;  // unique per gate opening (0: no cohort: the call came alone or from no gate)
  int size = 0;     // the cohort's calls to this worker, this one included
  // Of those, the calls sent at the same point of the step as this one (a
  // coordinator may gather them into one message); 0: all `size`. Not sent
  // to the worker.
  int together = 0;
  // The calls a coordinator gathers with this one, this one included.
  int gathered() const { return together > 0 ? together : size; }
  bool shared() const { return id != 0 && size > 1; }
};

}  // namespace specd
