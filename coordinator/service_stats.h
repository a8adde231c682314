// The coordinator's figures: totals over finished requests, the k histogram,
// the most recent requests, and the Prometheus registry (the same numbers,
// plus latency histograms and the workers' last-probed Info). Admin.Stats and
// GET /metrics both read from here; one logfmt line is written per request.
#pragma once
#include <array>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/spec/loop.h"
#include "common/metrics/metrics.h"
#include "proto/specd.pb.h"

namespace specd {

// One finished (or failed) request.
struct RequestOutcome {
  int64_t id = 0;
  int prompt_tokens = 0;
  const SpecResult* result = nullptr;
  double queue_seconds = 0;
  double ttft_seconds = 0;  // arrival to the first streamed token (0: none)
  bool adaptive = false;
};

class ServiceStats {
 public:
  explicit ServiceStats(size_t recent = 32);

  void Record(const RequestOutcome& o);
  // A request refused before it ran: "queue_full", "invalid", ...
  void Rejected(const std::string& reason);

  // Totals, k histogram and recent requests into a Stats response.
  void Fill(v1::StatsResponse* r) const;
  metrics::Registry& registry() { return registry_; }
  std::string RenderMetrics() const { return registry_.Render(); }

 private:
  mutable std::mutex mu_;
  int64_t requests_ = 0, failed_ = 0, prompt_tokens_ = 0, tokens_ = 0, steps_ = 0, spec_steps_ = 0, proposed_ = 0,
          accepted_ = 0, spec_appended_ = 0, draft_failures_ = 0, pipelined_ = 0, pipeline_fallbacks_ = 0;
  double seconds_ = 0, queue_seconds_ = 0;
  StepTimes time_, spec_time_;  // all steps; the speculative ones
  std::vector<int64_t> k_hist_;
  std::deque<v1::RequestRecord> recent_;
  size_t recent_max_;

  metrics::Registry registry_;
  metrics::Counter *prompt_tokens_c_, *completion_tokens_c_, *spec_steps_c_, *plain_steps_c_, *drafted_c_,
      *accepted_c_, *draft_failures_c_, *pipelined_c_, *pipeline_fallbacks_c_;
  metrics::Histogram *duration_h_, *queue_h_, *ttft_h_, *k_h_, *tps_h_;
  static constexpr int kTimeParts = 8;
  // A StepTimes' parts in the order of the counters' `part` labels.
  static std::array<double, kTimeParts> Parts(const StepTimes& t) {
    return {t.draft_forward, t.verify_forward, t.accept, t.transport, t.gate, t.wait, t.prefill, t.host};
  }
  metrics::Counter* time_c_[kTimeParts];       // specd_step_seconds_total by part
  metrics::Counter* spec_time_c_[kTimeParts];  // specd_speculative_step_seconds_total by part
};

}  // namespace specd
