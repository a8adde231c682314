// In-process measurement of speculation modes: the request loop of
// spec_loop.h on a LocalTarget / LocalDraft pair, one request at a time
// (batch 1), with tokens/s, acceptance, mean accepted length and the k
// histogram per mode and per prompt. `specd bench-spec` and the tuner use it.
//
// For repeatable comparisons calibrate the call costs once (CalibrateCosts)
// and pass the frozen table to every run: the adaptive policy's choices then
// depend only on the text, so its k histogram is the same run after run and
// only the timings vary.
#pragma once
#include <string>
#include <vector>

#include "common/engine/spec_local.h"
#include "common/engine/spec_loop.h"
#include "common/engine/spec_policy.h"

namespace specd {

struct BenchPrompt {
  std::string label;  // a class of prompts ("code", "prose"): results are also given per label
  std::vector<int32_t> tokens;
  SamplingParams sampling;  // greedy unless set
  int max_tokens = 128;     // generated tokens (end-of-generation tokens are ignored)
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
  int64_t steps = 0, speculative_steps = 0, proposed = 0, accepted = 0, spec_appended = 0;
  std::vector<int64_t> k_hist;  // steps by drafts verified (0: target-only steps)
  std::vector<BenchPromptResult> prompts;

  double TokensPerSecond() const { return seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0; }
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
  LocalDraft* draft = nullptr;  // null: only target-only modes run
  const Tokenizer* tokenizer = nullptr;
};

// Runs every prompt once in `mode`. `costs`: the call times the adaptive
// policy uses (null: each request measures its own as it runs).
absl::StatusOr<BenchResult> RunSpecBench(const BenchPair& pair, const std::vector<BenchPrompt>& prompts,
                                         const BenchMode& mode, SpecCosts* costs);

// Measures a target-only step and, for k = 1..k_max, a proposal of k drafts
// and a verify of them (median of `reps` after a warm-up) on `prompt`,
// records them in `costs` and freezes it.
absl::Status CalibrateCosts(const BenchPair& pair, const std::vector<int32_t>& prompt, int k_max, int reps,
                            SpecCosts* costs);

// Of repeated runs of one mode, the one with the median time.
BenchResult MedianRun(std::vector<BenchResult> runs);

}  // namespace specd
