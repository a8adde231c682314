// In-process measurement of speculation modes: the request loop of
// common/spec/loop.h on a LocalTarget / LocalDraft pair, one request at a time
// (batch 1), with tokens/s, acceptance, mean accepted length and the k
// histogram per mode and per prompt. `specd bench-spec` and the tuner use it.
//
// For repeatable comparisons calibrate the call costs once (CalibrateCosts,
// then runs of the workload) and pass the frozen table to every run: the
// adaptive policy's choices then depend only on the text, so its k histogram
// is the same run after run and only the timings vary.
#pragma once
#include <string>
#include <vector>

#include "common/engine/spec_local.h"
#include "common/spec/loop.h"
#include "common/spec/policy.h"

namespace specd {

struct BenchPrompt {
  std::string label;  // a class of prompts ("code", "prose"): results are also given per label
  std::vector<int32_t> tokens;
  SamplingParams sampling;  // greedy unless set
  int max_tokens = 128;     // generated tokens at most
  bool ignore_eos = true;   // true: exactly max_tokens (end-of-generation tokens are output like any other)
};

struct BenchMode {
  std::string name;
  int k = 0;              // fixed drafts per step; adaptive: the first steps' k; 0 and not adaptive: target-only
  bool adaptive = false;
  int draft_max = 8;      // adaptive cap
  float min_confidence = 0.0f;

  static BenchMode TargetOnly();
  static BenchMode Fixed(int k);
  static BenchMode Adaptive(int draft_max, float min_confidence);
  bool uses_draft() const { return k > 0 || adaptive; }
};

struct BenchPromptResult {
  std::string label;
  std::vector<int32_t> output;
  SpecStats stats;  // elapsed_seconds: the request's time, prefill included
};

struct BenchResult {
  std::string mode;
  int64_t tokens = 0;
  double seconds = 0;
  // The steps' time as the cost table prices them (draft and verify calls
  // only: no prefill, no draft catch-up): with a table measured on another
  // machine (bench-spec --costs), what this run's choices would take there.
  double modeled_seconds = 0;
  // Where `seconds` went: target prefill, Propose calls (draft catch-up
  // included), Verify calls; the rest is the loop's own work.
  double prefill_seconds = 0, draft_seconds = 0, verify_seconds = 0;
  StepTimes time;  // the steps taken apart (StepTimes: forwards, acceptance, transport, host)
  int64_t steps = 0, speculative_steps = 0, proposed = 0, accepted = 0, spec_appended = 0;
  std::vector<int64_t> k_hist;  // steps by drafts verified (0: target-only steps)
  std::vector<BenchPromptResult> prompts;
  std::string acceptance_prior;  // what the run's requests learned of the pair (AcceptancePrior::ToString)

  double TokensPerSecond() const { return seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0; }
  // Without the prompts' prefill: the decoding speculation changes.
  double DecodeTokensPerSecond() const {
    return seconds > prefill_seconds ? static_cast<double>(tokens) / (seconds - prefill_seconds) : 0.0;
  }
  double ModeledTokensPerSecond() const {
    return modeled_seconds > 0 ? static_cast<double>(tokens) / modeled_seconds : 0.0;
  }
  double AcceptanceRate() const { return proposed ? static_cast<double>(accepted) / proposed : 0.0; }
  double MeanAcceptedLength() const {
    return speculative_steps ? static_cast<double>(spec_appended) / speculative_steps : 0.0;
  }
  double MeanK() const;  // drafts verified per step
  // Tokens and seconds of the prompts with this label.
  double TokensPerSecond(const std::string& label) const;
};

struct BenchPair {
  LocalTarget* target = nullptr;
  LocalDraft* draft = nullptr;  // null: only target-only modes run (unless `proposer` is set)
  const Tokenizer* tokenizer = nullptr;
  // The modes' proposer when set (n-gram lookup, a chain); else the draft.
  Proposer* proposer = nullptr;
  Proposer* proposing() const { return proposer ? proposer : draft; }
};

// Runs every prompt once in `mode`. `costs`: the call times the adaptive
// policy uses (null: each request measures its own as it runs); `pricing`
// (default: `costs`) prices modeled_seconds.
absl::StatusOr<BenchResult> RunSpecBench(const BenchPair& pair, const std::vector<BenchPrompt>& prompts,
                                         const BenchMode& mode, SpecCosts* costs, const SpecCosts* pricing = nullptr);

// Measures a target-only step and, for k = 1..k_max, a proposal of k drafts
// and a verify of them, and the draft's catch-up after 8 and 32 target-only
// steps (SpecCosts::ObserveResume) (median of `reps` after a warm-up) on `prompt` and
// records them in `costs` (the caller freezes it, possibly after refining it
// with runs of the workload itself: one prompt's calls at one context length
// can differ from the workload's).
absl::Status CalibrateCosts(const BenchPair& pair, const std::vector<int32_t>& prompt, int k_max, int reps,
                            SpecCosts* costs);

// Of repeated runs of one mode, the one with the median time.
BenchResult MedianRun(std::vector<BenchResult> runs);

}  // namespace specd
