// The two sides of speculation hosted in one process, on an Engine each.
//
//   LocalDraft   DraftCore + the exchange buffer it writes (a slot per open
//                sequence). The draft worker serves its gRPC calls with it;
//                in-process users call it directly as a Proposer.
//   LocalTarget  TargetCore + the draft's exchange buffer, attached by handle
//                (read-only). The target worker serves Verify with it.
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
    int64_t device = 0;           // steps accepted on the device
    int64_t host = 0;             // steps accepted on the host
    int64_t device_failures = 0;  // device errors (each step then ran on the host)
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
    ExchangeRef ref;
  };
  // Reads each proposal's probabilities from the exchange buffer
  // (FAILED_PRECONDITION when stale or absent, sequence untouched), then
  // verifies all of them in one forward.
  std::vector<absl::StatusOr<Verdict>> VerifyBatch(const std::vector<VerifyJob>& jobs);

  // Verifier
  absl::Status Open(int32_t seq, const std::vector<int32_t>& tokens, const SamplingParams& sampling,
                    Deadline) override {
    return OpenSeq(seq, tokens, sampling);
  }
  absl::StatusOr<Verdict> Verify(int32_t seq, const std::vector<int32_t>& proposal, const ExchangeRef& ref,
                                 Deadline) override;
  void Release(int32_t seq) override { ReleaseSeq(seq); }

 private:
  // The device acceptance of job `j` (the CUDA IPC path); falls back to the
  // host rows if the device fails.
  absl::StatusOr<AcceptResult> AcceptOnDevice(const VerifyJob& j, const std::vector<TokenDist>& p, uint64_t seed,
                                              int64_t pos0);
  TargetCore core_;
  std::string digest_;
  std::unique_ptr<ExchangeBuffer> xb_;
  std::unique_ptr<DeviceAcceptor> dev_;  // device rows mapped (destroyed before xb_)
  bool prefer_host_ = false;
  std::string path_;
  PathCounts counts_;
  bool logged_first_device_ = false;
};

}  // namespace specd
