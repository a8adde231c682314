// One request's speculative loop, written once against the Proposer and
// Verifier interfaces (common/spec/proposer.h, verifier.h), so that the
// coordinator (gRPC clients of the two workers) and in-process users (the
// engine's LocalDraft / LocalTarget, common/engine/spec_local.h) run the same
// code.
//
// Per step: the proposer is synced to the committed sequence and proposes up
// to k tokens (their probabilities stay where the proposer put them; the loop
// passes only an ExchangeRef); the verifier scores them in one forward and
// returns the accepted prefix plus its correction or bonus token. The loop
// owns the committed sequence, so it can reopen the proposer at any time.
//
// The proposer is optional: when it fails (down, timed out, swapped, paused)
// the step runs target-only (k = 0) and the proposer is retried later,
// reopened with the committed tokens. Output is the target's either way.
//
// Each step's time is taken apart (StepTimes): the proposer's forwards, the
// verify forward, the acceptance rule, transport (the RPCs), waits (for the
// workers' engine threads, at the lockstep gate) and host work (the workers'
// and the loop's own), all measured by the run itself; the length policy is fed the forward costs and the
// overhead separately (SpecCosts; a forward the worker reports cold, one that
// did not replay a captured graph, feeds its cell only while the cell has no
// warm time: the step's tokens and time are counted all the same).
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/sampler/sampler.h"
#include "common/spec/policy.h"
#include "common/spec/proposer.h"
#include "common/spec/step_gate.h"
#include "common/spec/verifier.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/status.h"

namespace specd {

enum class FinishReason { kNone, kEos, kStop, kLength, kCancelled, kDeadline, kError };
const char* FinishReasonName(FinishReason r);

struct SpecRequest {
  int32_t seq = 0;                  // the id both workers know the sequence by
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int max_tokens = 128;
  bool ignore_eos = false;          // end-of-generation tokens are output like any other
  std::vector<std::string> stop;    // on decoded text; never emitted
  int k = 4;                        // 0: target-only; adaptive: the k used until costs are measured
  std::function<int()> live_k;      // when set, read each step instead of k (Admin.SetSpeculation); 0: draft off
  float min_confidence = 0.0f;      // the draft stops proposing below this top probability
                                    // (< 0: adaptive learns it, SpecPolicy::MinConfidence; fixed: 0)
  SpecPolicyOptions policy;         // adaptive length (policy.h); default: always k
  SpecCosts* costs = nullptr;       // step costs shared with other requests (null: this request measures its own)
  AcceptancePrior* prior = nullptr; // acceptance learned across requests of this pair (null: none)
  int max_context = 0;              // target's positions per sequence (0: unknown)
  Deadline deadline = kNoDeadline;
  std::function<bool()> cancelled;  // polled between steps
  std::chrono::milliseconds draft_retry{250};  // back-off after a draft failure
  // Lockstep with the other requests on the same workers (step_gate.h): their
  // steps' proposals, then their verifies, start together (null: no gate).
  StepGate* gate = nullptr;
  // Verify the draft's proposal straight from the exchange buffer
  // (Verifier::VerifyNext), sent together with the Propose, where the
  // proposer and the verifier can.
  bool pipeline_verify = true;
};

// Where a step's time went (seconds), measured by the run itself: the
// figures the proposer and the verifier report for their own work, the calls'
// times as the loop saw them, and the step's wall time. The parts add up to
// the step's time.
struct StepTimes {
  double draft_forward = 0;   // the proposer's forwards and sampling
  double verify_forward = 0;  // the target's forward
  double accept = 0;          // the target's sampling and the acceptance rule
  double transport = 0;       // the calls' time outside the workers (RPC)
  double gate = 0;            // at the lockstep gate, for the cohort's other members
  double wait = 0;            // in the workers before their engine thread ran the call (behind another
                              // batch; the hand-off)
  double wait_draft = 0;      // of wait: the draft worker's part (the rest is the target's)
  double prefill = 0;         // in the workers behind other requests' prefill slices (their prompts)
  double host = 0;            // everything else: the workers' and the loop's own host work
  double total() const { return draft_forward + verify_forward + accept + transport + gate + wait + prefill + host; }
  // What is not a forward, the acceptance, or other requests' prefill: the
  // step's own overhead.
  double overhead() const { return transport + gate + wait + host; }
  void Add(const StepTimes& o);
  // This minus o, part by part (e.g. all steps minus the speculative ones).
  StepTimes Minus(const StepTimes& o) const;
  // "per step: draft forwards 0.35 ms, verify forward 1.20 ms, acceptance 0.05 ms,
  // transport 0.30 ms, gate 0.02 ms, wait 0.05 ms (draft 0.01 ms), host 0.10 ms; overhead 0.47 ms (22%)" over
  // `steps` steps,
  // and "; others' prefill 2.10 ms" when there was any.
  std::string PerStep(int64_t steps) const;
};

// "step time per step: ..." over all `steps`, and when both kinds of step ran,
// the speculative ones (`spec`, over `spec_steps`) and the target-only ones
// apart, a line each: a mean over both hides what a speculative step costs.
std::string StepTimeReport(const StepTimes& all, int64_t steps, const StepTimes& spec, int64_t spec_steps);

// Figures of one step, delivered after the step's output is decided.
struct StepEvent {
  int k = 0;         // drafts asked for (the policy's choice)
  int proposed = 0;  // drafts verified (fewer than k when the draft was unsure or failed)
  int accepted = 0;
  int appended = 0;
  bool draft_used = false;
  int forwards = 0;   // draft forwards the proposal ran (one more than it kept when cut short by low confidence)
  int caught_up = 0;  // draft_used after target-only steps: committed tokens the draft first caught up on
  StepTimes time;
  std::vector<int32_t> tokens;  // emitted: trimmed at eos / stop / max_tokens
  std::vector<TokenLogprob> logprobs;  // per emitted token (when the sampling asks for them)
  std::string text;             // UTF-8 safe; stop strings and what follows them held back
};

struct SpecStats {
  int steps = 0;
  int speculative_steps = 0;
  int64_t proposed = 0;
  int64_t accepted = 0;
  int64_t spec_appended = 0;  // tokens decided by speculative steps (accepted + 1 each)
  int draft_failures = 0;
  double elapsed_seconds = 0;
  double prefill_seconds = 0;      // the prompt's prefill: the target's Open (the draft's too where it runs beside)
  double first_token_seconds = 0;  // start to the first emitted token (0: none emitted)
  double draft_seconds = 0;        // time in Propose calls
  double verify_seconds = 0;       // time in Verify calls
  StepTimes time;                  // the steps' time taken apart (sum over steps)
  StepTimes spec_time;             // the speculative steps' share of it (target-only: time.Minus(spec_time))
  // Steps by the number of drafts verified (index 0: target-only steps).
  std::vector<int64_t> k_hist;
  int pipelined_steps = 0;      // steps whose verify took the proposal from the exchange buffer
  int pipeline_fallbacks = 0;   // pipelined verifies that did not take it (the step verified after the proposal)
  double AcceptanceRate() const { return proposed ? static_cast<double>(accepted) / proposed : 0.0; }
  // Tokens decided per speculative step (accepted + 1), averaged.
  double MeanAcceptedLength() const {
    return speculative_steps ? static_cast<double>(spec_appended) / speculative_steps : 0.0;
  }
};

struct SpecResult {
  FinishReason reason = FinishReason::kNone;
  absl::Status status;           // not OK when the target failed (reason kError)
  std::vector<int32_t> tokens;   // emitted tokens (no eos)
  std::string text;              // their text, cut before a stop string
  std::string stop;              // the stop string that matched
  SpecStats stats;
  double TokensPerSecond() const {
    return stats.elapsed_seconds > 0 ? static_cast<double>(tokens.size()) / stats.elapsed_seconds : 0.0;
  }
};

// Runs one request to its end and releases the sequence in both workers.
// `draft` may be null (target-only). `on_step` may be empty; returning false
// from it cancels the request (the client went away).
SpecResult RunSpeculative(const SpecRequest& req, const Tokenizer& tok, Verifier& target, Proposer* draft,
                          const std::function<bool(const StepEvent&)>& on_step);

// The cost cells (SpecCosts) a step's calls belong to. Alone, a call's own
// length: a verify of `proposed` drafts, a proposal of its own forwards. A
// call the worker ran for several sequences at once (its batch: lockstep
// streams) costs each member all of it, whatever that member asked for
// (keyed by each member's own length, six lockstep streams' cells came out
// flat and drafting more looked free: round 15). A verify forward's time
// follows the tokens it scores: cell n is a forward of n + 1 tokens, one
// sequence's n drafts or several sequences' tokens together (keyed by the
// drafts per member, as in rounds 16-17, a cell mixed batches of one to six
// members as streams came and went: the CPU's cells fell with length), and
// the policy prices a step of m members drafting n at cell m (n + 1) - 1
// (CostTable::members). A batched proposal runs a forward per position
// while any member still drafts: the cell of its members and the forwards it
// ran (its longest member's). A proposal whose batch was not plain
// (ProposeFigures::batch_mixed: members ran different lengths, or one
// caught up first) counts as cold: its later forwards held fewer members,
// so one member exploring a position deeper made that length look nearly
// free (round 19's adaptive six streams drifted to k = 7-8).
int VerifyCostCell(const VerifyFigures& vf, int proposed);
struct DraftCell {
  int members = 1;
  int forwards = 0;
  bool plain = true;  // false: counts as cold (above)
};
DraftCell DraftCostCell(const ProposeFigures& pf);

// Streams text with stop strings: holds back any tail that could begin a stop
// string, so text past a stop is never emitted.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  // Adds decoded text; returns what may be emitted now. Sets matched() when
  // a stop string appeared (the returned text ends before it).
  std::string Push(std::string_view text);
  // The held-back tail at the end of generation (no stop matched).
  std::string Flush();
  bool matched() const { return !match_.empty(); }
  const std::string& match() const { return match_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  std::string match_;
};

}  // namespace specd
