// A C++ client of the coordinator (the `specd` CLI's generate --coordinator,
// chat, stats, swap-draft; loadgen; tune): the request API
// (common/api/request.h) over gRPC, and the admin calls. Plain structs in and
// out: callers need neither gRPC nor the generated protobuf headers.
//
//   auto c = specd::client::Client::Connect("127.0.0.1:7810");
//   api::Request req;
//   req.prompt = "Once upon a time";
//   auto sum = (*c)->Generate(req, [](const api::Event& ev) {
//     fputs(ev.text.c_str(), stdout);
//     return true;  // false cancels the request
//   });
//   fprintf(stderr, "%s\n", api::FormatSummary(*sum).c_str());
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/api/request.h"
#include "common/util/status.h"

namespace specd::client {

struct Health {
  bool serving = false;
  bool target_ready = false;
  bool draft_ready = false;
  std::string target_model, draft_model;
  int k = 0;
  bool speculation_enabled = false;
  bool adaptive = false;
  int draft_max = 0;
};

// One worker as Stats reports it.
struct WorkerStats {
  bool reachable = false;
  std::string role, model_name, model_path, arch, vocab_digest, exchange;
  int64_t pid = 0;
  int vocab_size = 0;
  int max_seqs = 0, max_seq_len = 0, active_sequences = 0;
  int kv_used_blocks = 0, kv_total_blocks = 0;
  int64_t forwards = 0, batches = 0, batched_requests = 0, model_loads = 0;
  int64_t cohort_batches = 0, cohort_timeouts = 0;  // batches gathering a lockstep cohort; started short of it
  int64_t prefill_ahead_rounds = 0;    // prefill slices that ran while a gathered batch waited
  double prefill_ahead_seconds = 0;
  int64_t cold_forwards = 0;  // forward batches run cold (CUDA: a shape's first run, its graph capture)
  // The hand-off of batched calls, seconds summed over batched_requests (InfoResponse).
  double handoff_gather_seconds = 0, handoff_start_seconds = 0, handoff_back_seconds = 0;
  int max_batch = 0;
  uint64_t memory_total = 0;
  int64_t memory_budget = -1;
  // The memory ledger by part (total = weights + kv + activations + exchange + runtime + unplanned).
  uint64_t memory_weights = 0, memory_kv = 0, memory_activations = 0, memory_exchange = 0, memory_runtime = 0;
  uint64_t memory_unplanned = 0;  // the driver's figure beyond the plan
  uint64_t memory_shared = 0;     // weights mapped from another process (pid memory_shared_from), not in total
  int64_t memory_shared_from = 0;
  uint64_t memory_others = 0;     // other engines on the device at start, against the same budget
  std::string weight_sharing;     // how the weights are held, in words
  int64_t forward_tokens = 0, prefill_tokens = 0;  // prefill: chunked prompt tokens; the rest were steps
  double forward_seconds = 0;
  int64_t prefill_chunk = 0;
  int batch_limit = 0;
  double BatchMean() const { return batches ? static_cast<double>(batched_requests) / batches : 0.0; }
};

// One finished request as Stats lists it.
struct RequestRecord {
  int64_t id = 0;
  int prompt_tokens = 0, completion_tokens = 0;
  std::string finish_reason;  // eos, stop, length, cancelled, deadline; "error" with `error`
  std::string error;
  double acceptance_rate = 0, mean_accepted_length = 0, tokens_per_second = 0;
  double queue_seconds = 0, open_seconds = 0, time_to_first_token_seconds = 0, elapsed_seconds = 0, mean_k = 0;
  bool adaptive = false;
};

struct Stats {
  int64_t requests_total = 0, requests_active = 0, requests_failed = 0;
  int64_t completion_tokens = 0, steps = 0, proposed = 0, accepted = 0, draft_failures = 0;
  int64_t pipelined_steps = 0, pipeline_fallbacks = 0;  // Verifies that took the proposal from the exchange buffer
  double acceptance_rate = 0, mean_accepted_length = 0, tokens_per_second = 0, uptime_seconds = 0;
  int k = 0;
  bool speculation_enabled = false, draft_ready = false, target_ready = false;
  int64_t draft_swaps = 0, draft_reconnects = 0;
  WorkerStats target, draft;
  // Scheduling and admission.
  int queue_depth = 0, max_queue = 0, max_batch = 0, max_seq_len = 0, requests_running = 0;
  int64_t requests_rejected = 0, kv_blocks_reserved = 0, prompt_tokens = 0;
  double busy_seconds = 0, throughput_tokens_per_second = 0, mean_queue_seconds = 0;
  double verify_batch_mean = 0, draft_batch_mean = 0;  // sequences per target / draft batch
  // Speculation.
  bool adaptive = false;
  int draft_max = 0;
  std::vector<int64_t> k_histogram;  // steps by drafts verified (index 0: target-only)
  std::string step_costs;            // the measured call times the adaptive policy uses
  std::string lockstep;              // the lockstep gate's start / verify barriers (StepGateFigures)
  std::string acceptance_prior;      // the acceptance a new adaptive request starts from
  StepTimes step_time;               // the finished requests' steps taken apart (summed over `steps`)
  StepTimes step_time_speculative;   // the speculative steps' share (summed over `speculative_steps`)
  int64_t speculative_steps = 0;
  std::vector<RequestRecord> recent;  // newest first
};

// What SetSpeculation left in force.
struct SpeculationSettings {
  int k = 0;
  bool enabled = false, adaptive = false;
  int draft_max = 0;
};

// How to reach a coordinator that requires a key or speaks TLS.
struct ConnectOptions {
  std::string api_key;  // sent as `authorization: Bearer KEY`
  std::string tls_ca;   // PEM roots of the coordinator's certificate; empty: plaintext
};

class Client : public api::Generator {
 public:
  // `address`: HOST:PORT or unix:/PATH. Connects lazily.
  static absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& address,
                                                         const ConnectOptions& opts = {});
  ~Client() override;

  // Streams a Generate (or Chat, when req.messages is set); the request's
  // deadline is the call's. `on_event` returning false cancels the request
  // (the result is then CANCELLED). gRPC errors come back as the matching
  // absl codes, with the server's message.
  absl::StatusOr<api::Summary> Generate(const api::Request& req, const api::EventFn& on_event = {}) override;
  absl::StatusOr<std::vector<int32_t>> Tokenize(const std::string& text, bool add_special = true,
                                                bool parse_special = false) override;
  // wait_for_ready: wait (up to `timeout`) for the coordinator to be reachable
  // instead of failing at once when it is not.
  absl::StatusOr<Health> GetHealth(std::chrono::milliseconds timeout = std::chrono::seconds(5),
                                   bool wait_for_ready = false);
  // Polls Health until serving (and, if `need_draft`, the draft is ready).
  absl::Status WaitServing(std::chrono::milliseconds timeout, bool need_draft = false);
  absl::StatusOr<Stats> GetStats(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // Returns the new draft's figures; FAILED_PRECONDITION (old draft kept)
  // when its vocabulary differs from the target's.
  absl::StatusOr<WorkerStats> SwapDraft(const std::string& path,
                                        std::chrono::milliseconds timeout = std::chrono::minutes(10));
  // Unset fields keep their value; returns the settings in force (k, enabled).
  // Setting k alone selects fixed-k mode (adaptive off).
  absl::StatusOr<std::pair<int, bool>> SetSpeculation(std::optional<int> k, std::optional<bool> enabled);
  absl::StatusOr<SpeculationSettings> SetSpeculation(std::optional<int> k, std::optional<bool> enabled,
                                                     std::optional<bool> adaptive, std::optional<int> draft_max);

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A multi-line report of Stats.
std::string FormatStats(const Stats& s);

}  // namespace specd::client
