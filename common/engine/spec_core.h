// Speculative decoding inside one worker process: the per-sequence state the
// draft and target workers keep, and their two operations.
//
//   DraftCore::Propose   k tokens x_1..x_k drawn from the draft's processed
//                        distributions q_1..q_k (written, when dense, to
//                        backend memory the exchange buffer names; never sent
//                        over gRPC).
//   TargetCore::Verify   one batched forward over the pending token(s) and
//                        x_1..x_k (k+1 logits rows), the acceptance rule of
//                        common/spec/acceptance.h, KV rollback to the accepted
//                        length. k = 0 is plain target-only decoding.
//
// Sampling and acceptance run where the logits are (Backend::Sample,
// Backend::Accept): on a GPU nothing of vocabulary size reaches the host;
// only token ids and small figures do. Both take a batch of sequences, so
// one forward serves every active request (continuous batching). A
// sequence's state is its committed tokens (prompt + output); the KV cache
// holds a prefix of them (and, in the draft, possibly rejected or cut
// proposals, dropped at the next Sync). The last committed token is never in
// the KV: it is the input of the next step.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "common/engine/engine.h"
#include "common/sampler/sampler.h"
#include "common/spec/acceptance.h"

namespace specd {

struct SeqState {
  std::vector<int32_t> committed;  // prompt + accepted output
  std::vector<int32_t> fed;        // tokens whose K/V are in the cache (prefix of positions)
  SamplingParams sampling;
  uint64_t open_id = 0;            // tells a reopened sequence of the same id from the old one
};

// Part of a chunked prefill: up to `max_tokens` more pending tokens of `seq`.
struct PrefillSlice {
  int32_t seq = 0;
  int64_t max_tokens = 0;
};

// Shared sequence bookkeeping of both cores.
class SeqCore {
 public:
  explicit SeqCore(Engine* engine) : engine_(engine) {}
  Engine* engine() const { return engine_; }

  // Creates the sequence and prefills all prompt tokens but the last; with
  // prefill = false they stay pending, for Prefill (chunked) or for the
  // first step to feed.
  absl::Status Open(int32_t seq, const std::vector<int32_t>& prompt, const SamplingParams& sampling,
                    bool prefill = true);
  // Committed tokens, but the last, that are not in the KV yet (-1: not open).
  int64_t PrefillPending(int32_t seq) const;
  // Chunked prefill: one batched forward over the next pending tokens of each
  // slice's sequence. Returns, per slice, the tokens still pending after it
  // or why it failed (a failed forward fails every slice and changes nothing).
  std::vector<absl::StatusOr<int64_t>> Prefill(const std::vector<PrefillSlice>& slices);
  // Makes the committed tokens committed[:base_len] + tokens, and drops KV
  // positions that no longer match (rollback). base_len may not exceed the
  // current committed length.
  absl::Status Sync(int32_t seq, int64_t base_len, const std::vector<int32_t>& tokens);
  void Release(int32_t seq);
  bool Has(int32_t seq) const { return seqs_.count(seq) != 0; }
  const SeqState* Get(int32_t seq) const;
  int64_t CommittedLength(int32_t seq) const;
  std::vector<int32_t> Sequences() const;

 protected:
  // Truncates the KV of `s` to the longest prefix of fed that is committed,
  // leaving at least the last committed token out of the cache.
  absl::Status Reconcile(int32_t seq, SeqState& s);
  Engine* engine_;
  std::map<int32_t, SeqState> seqs_;
  uint64_t next_open_id_ = 1;
};

// What a DraftCore::Propose or TargetCore::Verify batch spent (seconds of
// device time: Engine::Timing).
struct CoreTimes {
  double forward = 0;  // forwards (the draft's: with the sampling enqueued with them)
  double accept = 0;   // the target's sampling and acceptance
  bool cold = false;   // some of it ran cold (Engine::Timing::cold)
};

// The most tokens one proposal drafts (the exchange buffer's kMaxK).
constexpr int kMaxDraftTokens = 256;

struct DraftJob {
  int32_t seq = 0;
  int k = 4;
  // Adaptive length: stop before a token whose confidence (sampler.h
  // Confidence) falls under this (0 = always propose k).
  float min_confidence = 0.0f;
  bool want_confidence = false;  // report confidences (implied by min_confidence > 0)
  // Backend memory for the k dense q rows (a sampled draft, read by the
  // target); null: no rows written (greedy: q is one-hot at the tokens).
  float* q = nullptr;
};

struct DraftResult {
  int32_t seq = 0;
  std::vector<int32_t> tokens;     // x_1..x_k' (k' <= k)
  std::vector<float> confidence;   // per token (empty unless asked for)
  int forwards = 0;                // forwards this sequence took part in
  absl::Status status;
};

class DraftCore : public SeqCore {
 public:
  using SeqCore::SeqCore;
  // One forward per draft step for all sequences still proposing. Each
  // token is sampled where the logits are and fed to the next step there
  // (Backend::Sample, Batch::fed), so on a device the k steps are enqueued
  // with no host round trip and one wait at the end; the proposal is then cut
  // before the first unsure token (its forwards were spent). Where the
  // results are in host memory (the CPU backend) a sequence stops at once
  // instead.
  std::vector<DraftResult> Propose(const std::vector<DraftJob>& jobs, CoreTimes* times = nullptr);

 private:
  absl::Status EnsureResults(size_t n);
  // Backend memory: cap_ tokens, then cap_ confidences (floats); read back in one copy.
  int32_t* tokens_dev_ = nullptr;
  float* conf_dev_ = nullptr;
  size_t cap_ = 0;
  std::vector<int32_t> results_host_;  // the same layout
};

struct VerifyRequest {
  int32_t seq = 0;
  std::vector<int32_t> proposals;  // x_1..x_k (may be empty: target-only step)
  const float* q = nullptr;        // backend memory: k dense draft rows; null: one-hot at the proposals
  // When the acceptance read q in place (rows the draft may rewrite): checked
  // after it; an error fails this sequence's step and leaves it as it was.
  std::function<absl::Status()> still_valid;
};

struct VerifyResult {
  int32_t seq = 0;
  int n_proposed = 0;
  int n_accepted = 0;
  std::vector<int32_t> appended;  // x_1..x_n then the correction/bonus token
  std::vector<TokenLogprob> logprobs;  // per appended token, when the sequence asks (SamplingParams::logprobs)
  absl::Status status;
};

class TargetCore : public SeqCore {
 public:
  using SeqCore::SeqCore;
  // One forward over every request's pending token and proposals, the
  // target's sampling and the acceptance rule where the logits are
  // (Backend::Accept); only the decisions come back (and the raw logits rows
  // of the sequences that ask for logprobs).
  std::vector<VerifyResult> Verify(const std::vector<VerifyRequest>& reqs, CoreTimes* times = nullptr);

 private:
  int32_t* results_dev_ = nullptr;  // backend memory: 4 ints per request
  size_t cap_ = 0;
  std::vector<int32_t> results_host_;
  std::vector<float> logprob_rows_;  // raw logits rows of the sequences that ask for logprobs
};

}  // namespace specd
