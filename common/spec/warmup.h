// Warm-up: one synthetic request run through the real loop before serving,
// whose steps ask for every speculation length 0..k_max three times, greedy and
// sampled, so that each step shape a request can meet has run before a
// client pays for it.
//
// Why: the CUDA backend runs a batch shape eagerly the first time and
// captures its graph the second (common/backend/cuda/cuda_backend.cc), and
// the adaptive policy visits many lengths. A fresh 256-token adaptive request
// on the ~80% pair met 7 lengths, ran 16 batches eagerly and captured 14
// graphs: its verify forward took 8.2 ms a step where fixed k = 6's took 7.3
// (round 35, H200), and it ran at 0.90x the best fixed k. vLLM captures its
// graphs at start; llama.cpp runs one warm-up decode.
//
// The request goes through the same Proposer / Verifier (in process or over
// gRPC), so the exchange rows, the pipelined verify and the draft's catch-up
// after target-only steps are the paths requests take. Its greedy steps'
// costs go to the generator's table (WarmupOptions::costs; a shape's first
// runs count as cold there, ignored once a warm run of it exists), so a fresh
// request's policy starts from what every length costs on this device
// instead of learning it on the client's tokens (round 36, CPU: the adaptive
// policy at 0.95x the best fixed k before, 1.00x after). The sampled steps
// keep theirs apart: a sampled draft forward writes its probability row
// (H100: 1.44 ms a forward in the mixed table against greedy's 1.10, and
// 0.65 ms of overhead against 0.04), which priced a greedy request's
// drafts a third too high (round 37). It teaches no
// acceptance (its text and lengths are not a request's: no AcceptancePrior)
// and takes no lockstep gate.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/spec/loop.h"

namespace specd {

// When a generator warms up: kAuto where a worker's backend prepares shapes
// (Backend::PreparesShapes: CUDA graphs), kAlways (also the CPU: tests), kOff.
enum class WarmupMode { kAuto, kAlways, kOff };
// "auto", "always", "off" (INVALID_ARGUMENT otherwise).
absl::StatusOr<WarmupMode> ParseWarmupMode(std::string_view s);
// Whether a generator in `mode` warms up, given whether a backend prepares shapes.
inline bool WarmsUp(WarmupMode mode, bool prepares_shapes) {
  return mode == WarmupMode::kAlways || (mode == WarmupMode::kAuto && prepares_shapes);
}

struct WarmupOptions {
  int32_t seq = 0;      // the sequence id the warm-up opens (and releases) on both workers
  int k_max = 0;        // the longest speculation to warm (0 or no draft: target-only steps only)
  int max_context = 0;  // the target's positions per sequence (0: unknown)
  // The prompt's length: the workers' largest forward (their prefill chunk),
  // so that every buffer sized by a batch's tokens has grown before the
  // graphs are captured (a buffer that grows later drops them all: round 12's
  // warm-up, with a 9-token prompt, was undone by a 23-token request).
  int prompt_tokens = 0;
  Deadline deadline = kNoDeadline;
  bool pipeline_verify = true;  // as the requests' (SpecRequest::pipeline_verify)
  std::function<bool()> cancelled;  // polled between steps (a shutdown)
  // Where the greedy steps' costs go: the table the requests share (null: one of its own).
  SpecCosts* costs = nullptr;
};

struct WarmupReport {
  absl::Status status;  // the first request that failed (the rest still ran)
  int requests = 0;
  int prompt_tokens = 0;
  int steps = 0;
  std::vector<int> lengths;  // drafts verified per step, in order (telemetry and tests)
  double seconds = 0;
  std::string ToString() const;  // "2 requests of a 512-token prompt, 54 steps, lengths 0..8, 0.61 s"
};

// The schedule of one warm-up request: 0, 0, 0, 1, 1, 1, ..., k_max x 3: a
// shape's eager run, its graph's capture, then a replay, so that every
// length's cost is measured warm within one pass.
std::vector<int> WarmupSchedule(int k_max);
// The most positions the warm-up's sequence holds (its prompt and its
// steps' tokens): what admission reserves for it.
int64_t WarmupPositions(const WarmupOptions& o);

// Runs the schedule once greedy and once sampled (temperature 1, the OpenAI
// API's default: the sampler's and the acceptance rule's device work).
// `draft` may be null (target-only steps).
WarmupReport WarmUp(const Tokenizer& tok, Verifier& target, Proposer* draft, const WarmupOptions& o);

}  // namespace specd
