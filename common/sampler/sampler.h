// Turning logits into the distribution a token is drawn from, and drawing it.
// Both workers and the in-process generator use this one implementation; the
// speculative acceptance rule (common/spec) consumes the same distributions.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/util/status.h"

namespace specd {

struct SamplingParams {
  float temperature = 0.0f;         // <= 0: greedy (argmax)
  int32_t top_k = 0;                // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // 1: off (CTRL-style: divide positive logits, multiply negative)
  int32_t repetition_window = 64;   // how many recent tokens the penalty looks at
  uint64_t seed = 0;
  // Not sampling but reported with it: the log-probabilities of each output
  // token under the model (softmax of the raw logits, before any of the
  // processing above), as OpenAI's `logprobs`. -1: none; 0: the chosen
  // token's; n (<= kMaxTopLogprobs): also the n most likely tokens'.
  int32_t logprobs = -1;

  bool greedy() const { return temperature <= 0.0f; }
  absl::Status Validate() const;
  std::string ToString() const;
};

constexpr int32_t kMaxTopLogprobs = 20;

// One output token's log-probability and, when asked for, the most likely
// alternatives at its position (most likely first; ties: lower id first).
struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<int32_t> top_tokens;
  std::vector<float> top_logprobs;
};

// log_softmax(logits)[token] and the `top_n` largest entries.
TokenLogprob LogprobOf(const float* logits, int vocab, int32_t token, int top_n);

// A processed distribution, sparse: the tokens with nonzero probability and
// their probabilities (summing to 1), sorted by token id. Greedy gives one
// token with probability 1.
struct TokenDist {
  std::vector<int32_t> ids;
  std::vector<float> probs;
  float Prob(int32_t id) const;  // 0 for tokens outside the support
};

// Applies, in order: repetition penalty over `recent` (last window tokens),
// temperature, top-k, top-p (nucleus), min-p (relative to the top probability),
// and renormalizes. Deterministic; ties broken by lower token id; NaN logits
// count as -inf. top-k and top-p are thresholds in that order, found without
// sorting (select.h); softmax weights are double, summed in id order.
void ProcessLogits(const float* logits, int vocab, const SamplingParams& p, std::span<const int32_t> recent,
                   TokenDist* out);

// How sure the draft is of its token: the processed distribution's top
// probability; for greedy decoding (one-hot) the top probability of the
// softmax at temperature 1 of `logits` after the repetition penalty over
// `recent` (the row the greedy token was taken from).
float Confidence(const float* logits, int vocab, const SamplingParams& p, std::span<const int32_t> recent,
                 const TokenDist& dist);

// Draws from `dist` with uniform u in [0, 1) by inverse CDF in id order.
int32_t SampleDist(const TokenDist& dist, double u);
// Index of the largest logit; lowest index on ties. NaN-safe (NaNs lose).
int32_t Argmax(const float* logits, int n);

}  // namespace specd
