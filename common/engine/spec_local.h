// The two sides of speculation hosted in one process, on an Engine each.
//
//   LocalDraft   DraftCore + the exchange buffer it writes (a slot per open
//                sequence). The draft worker serves its gRPC calls with it;
//                in-process users call it directly as a Proposer.
//   LocalTarget  TargetCore + the draft's exchange buffer, attached by handle.
//                The target worker serves Verify with it; in-process users
//                call it as a Verifier.
//
// Where a proposal's q rows go: a greedy draft writes none (q is one-hot at
// its tokens); a sampled one has its sampler write them to the device rows
// (kind "cuda": exchange_device.h) or, on the CPU, to the host rows; a draft
// on the GPU without device rows, or whose target asked for host rows, also
// copies them to the host rows.
//
// Both take batches (ProposeBatch / VerifyBatch: one forward per draft step or
// per verify for all sequences), which the workers' schedulers fill from
// concurrent RPCs. Neither is thread-safe: one thread drives each engine.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/engine/exchange_device.h"
#include "common/engine/spec_core.h"
#include "common/spec/proposer.h"
#include "common/spec/verifier.h"
#include "common/shm/exchange.h"

namespace specd {

class LocalDraft : public Proposer {
 public:
  // `engine` must outlive this. The buffer has engine->options().max_seqs slots.
  // shm_kind: "posix" (host rows), "cuda" (host rows + CUDA IPC device rows;
  // an error when the engine is not on the CUDA backend or the export
  // fails), "auto" (cuda when it can be had, else posix; logged either way).
  static absl::StatusOr<std::unique_ptr<LocalDraft>> Create(Engine* engine, int k_max,
                                                            const std::string& shm_kind = "posix");
  Engine* engine() const { return core_.engine(); }
  const ExchangeBuffer& exchange() const { return *xb_; }
  // Which exchange the draft exports and why, e.g. "device (CUDA IPC ...)".
  const std::string& exchange_path() const { return path_; }
  int k_max() const { return k_max_; }
  const DraftCore& core() const { return core_; }

  // Opens `seq` holding `tokens`, replacing a sequence of that id; with
  // prefill = false the tokens stay pending for PrefillSeqs (chunked prefill).
  absl::Status OpenSeq(int32_t seq, const std::vector<int32_t>& tokens, const SamplingParams& sampling,
                       bool prefill = true);
  absl::Status SyncSeq(int32_t seq, int64_t base_len, const std::vector<int32_t>& tokens);
  bool ReleaseSeq(int32_t seq);  // false if it was not open
  std::vector<absl::StatusOr<int64_t>> PrefillSeqs(const std::vector<PrefillSlice>& slices) {
    return core_.Prefill(slices);
  }

  // Syncs each request's sequence, then proposes for all of them in one
  // batch and publishes each proposal in its sequence's slot.
  std::vector<absl::StatusOr<Proposal>> ProposeBatch(const std::vector<ProposeRequest>& jobs);

  // Proposer: in-process calls do not wait, so deadlines are not needed.
  absl::Status Open(int32_t seq, const std::vector<int32_t>& tokens, const SamplingParams& sampling,
                    Deadline) override {
    return OpenSeq(seq, tokens, sampling);
  }
  absl::StatusOr<Proposal> Propose(const ProposeRequest& req, Deadline) override;
  void Release(int32_t seq) override { ReleaseSeq(seq); }

 private:
  explicit LocalDraft(Engine* engine) : core_(engine) {}
  DraftCore core_;
  std::unique_ptr<ExchangeBuffer> xb_;
  std::unique_ptr<DeviceRowsExport> dev_;  // kind "cuda" (destroyed before xb_)
  float* rows_ = nullptr;                  // no device rows, backend not host memory: the sampler's rows
  std::string path_;
  int k_max_ = 0;
  std::map<int32_t, int> slot_of_;  // open sequence -> exchange slot
  std::vector<int> free_slots_;
};

class LocalTarget : public Verifier {
 public:
  explicit LocalTarget(Engine* engine);
  Engine* engine() const { return core_.engine(); }
  const TargetCore& core() const { return core_; }
  const std::string& vocab_digest() const { return digest_; }

  // Maps a draft's exchange buffer (replacing the current one) after checking
  // that its vocabulary is this model's. A buffer with device rows (kind
  // "cuda") is verified on the GPU when this engine runs on the CUDA backend
  // and the rows can be mapped; otherwise from its host rows (logged).
  absl::Status Attach(const std::string& kind, const std::string& name);
  const ExchangeBuffer* exchange() const { return xb_.get(); }
  // Reads the host rows even when device rows could be used.
  void set_prefer_host(bool on) { prefer_host_ = on; }
  // "device (...)" or "host (...)": how the attached buffer is verified.
  const std::string& exchange_path() const { return path_; }
  struct PathCounts {
    int64_t device = 0;           // steps that read the draft's rows on the device
    int64_t host = 0;             // steps that read the draft's host rows
    int64_t one_hot = 0;          // steps whose q was one-hot (greedy, deterministic proposers): no rows
    int64_t device_failures = 0;  // device-rows errors (then the host rows, from the next proposal on)
  };
  const PathCounts& path_counts() const { return counts_; }

  absl::Status OpenSeq(int32_t seq, const std::vector<int32_t>& tokens, const SamplingParams& sampling,
                       bool prefill = true);
  absl::Status SyncSeq(int32_t seq, int64_t base_len, const std::vector<int32_t>& tokens);
  bool ReleaseSeq(int32_t seq);
  std::vector<absl::StatusOr<int64_t>> PrefillSeqs(const std::vector<PrefillSlice>& slices) {
    return core_.Prefill(slices);
  }

  struct VerifyJob {
    int32_t seq = 0;
    std::vector<int32_t> tokens;  // the proposal (empty: target-only step)
    ExchangeRef ref;              // slot < 0: q one-hot at the tokens (no exchange rows)
    CohortTag cohort;             // the verifies released with this one (batching only)
  };
  // Checks each proposal against the exchange buffer (FAILED_PRECONDITION
  // when stale or absent, sequence untouched), then verifies all of them in
  // one forward, reading their q rows in place.
  std::vector<absl::StatusOr<Verdict>> VerifyBatch(const std::vector<VerifyJob>& jobs);

  // Verifier
  absl::Status Open(int32_t seq, const std::vector<int32_t>& tokens, const SamplingParams& sampling,
                    Deadline) override {
    return OpenSeq(seq, tokens, sampling);
  }
  absl::StatusOr<Verdict> Verify(int32_t seq, const std::vector<int32_t>& proposal, const ExchangeRef& ref,
                                 const CohortTag&, Deadline) override;
  void Release(int32_t seq) override { ReleaseSeq(seq); }

 private:
  enum class Rows { kOneHot, kDevice, kHost };
  // Where job `j`'s q rows are for this target (checked against the slot):
  // sets *q (null: one-hot) and *from.
  absl::Status RowsFor(const VerifyJob& j, const float** q, Rows* from);
  // Reading host rows: tells the draft to write them from now on (logged once).
  void RequestHostRows();
  TargetCore core_;
  std::string digest_;
  std::unique_ptr<ExchangeBuffer> xb_;
  std::unique_ptr<DeviceRowsImport> dev_;  // device rows mapped (destroyed before xb_)
  float* stage_ = nullptr;                 // host rows uploaded (a target whose backend is not host memory)
  size_t stage_bytes_ = 0;
  bool prefer_host_ = false;
  std::string path_;
  PathCounts counts_;
  bool logged_first_device_ = false;
};

}  // namespace specd
