// Speculative decoding inside one worker process: the per-sequence state the
// draft and target workers keep, and their two operations.
//
//   DraftCore::Propose   k tokens x_1..x_k drawn from the draft's processed
//                        distributions q_1..q_k, which are written to the
//                        exchange buffer (never sent over gRPC).
//   TargetCore::Verify   one batched forward over the pending token(s) and
//                        x_1..x_k (k+1 logits rows), the acceptance rule of
//                        common/spec/acceptance.h, KV rollback to the accepted
//                        length. k = 0 is plain target-only decoding.
//
// Both take a batch of sequences, so one forward serves every active request
// (continuous batching). A sequence's state is its committed tokens (prompt +
// output); the KV cache holds a prefix of them (and, in the draft, possibly
// rejected proposals, dropped at the next Sync). The last committed token is
// never in the KV: it is the input of the next step.
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

// What a DraftCore::Propose or TargetCore::Verify batch spent (seconds).
struct CoreTimes {
  double forward = 0;  // forwards (and, on a device, the sampling enqueued with them)
  double accept = 0;   // the target's sampling and acceptance
};

struct DraftJob {
  int32_t seq = 0;
  int k = 4;
  // Adaptive length: stop early once the draft's top probability falls under
  // this (0 = always propose k).
  float min_confidence = 0.0f;
};

struct DraftResult {
  int32_t seq = 0;
  std::vector<int32_t> tokens;     // x_1..x_k' (k' <= k)
  std::vector<float> confidence;   // the draft's top probability at each step
  int forwards = 0;                // forwards this sequence took part in
  absl::Status status;
};

class DraftCore : public SeqCore {
 public:
  using SeqCore::SeqCore;
  // Fills `q_out[i]` (each must hold vocab floats for k rows) with the dense
  // processed draft distributions of request i. One forward per draft step
  // for all sequences still proposing.
  std::vector<DraftResult> Propose(const std::vector<DraftJob>& reqs, const std::vector<float*>& q_out,
                                   CoreTimes* times = nullptr);
};

struct VerifyRequest {
  int32_t seq = 0;
  std::vector<int32_t> proposals;  // x_1..x_k (may be empty: target-only step)
  const float* q = nullptr;        // k x vocab draft probabilities
  // When set (k > 0), applies the acceptance rule instead of VerifyProposals
  // on `q`: the CUDA IPC path, where q stays on the device. Gets the k+1
  // processed target distributions, the seed and the position of x_1. An
  // error fails this sequence's step and leaves the sequence as it was.
  std::function<absl::StatusOr<AcceptResult>(const std::vector<TokenDist>& p, uint64_t seed, int64_t pos0)> accept;
};

struct VerifyResult {
  int32_t seq = 0;
  int n_proposed = 0;
  int n_accepted = 0;
  std::vector<int32_t> appended;  // x_1..x_n then the correction/bonus token
  absl::Status status;
};


class TargetCore : public SeqCore {
 public:
  using SeqCore::SeqCore;
  std::vector<VerifyResult> Verify(const std::vector<VerifyRequest>& reqs, CoreTimes* times = nullptr);
};

}  // namespace specd
