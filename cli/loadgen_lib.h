// The load generator behind `specd loadgen`, `specd tune` and the soak test:
// many concurrent streaming Generate calls against one coordinator, with
// per-request timing, status accounting and (greedy) output verification.
//
//   LoadSpec s;
//   s.coordinator = "127.0.0.1:7810";
//   s.concurrency = 8;
//   s.requests = 200;
//   auto r = RunLoad(s);
//   printf("%s", FormatReport(*r).c_str());
//
// A run has three phases: request templates are built (prompts synthesized
// from a word list and cut to an exact token count with the coordinator's
// tokenizer, or read from a file); with verify_greedy, one target-only
// reference per template; then the measured load. Every request ends with a
// status (each call is bounded by request_timeout_ms), so `lost` is always 0
// unless something is badly wrong.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/api/request.h"
#include "common/sampler/sampler.h"
#include "common/util/status.h"

namespace specd::loadgen {

// A closed integer interval drawn uniformly; "N" or "A:B".
struct IntRange {
  int lo = 0, hi = 0;
};
absl::StatusOr<IntRange> ParseRange(const std::string& s, int min_value, int max_value);

struct LoadSpec;
// "default,off,k4,a8,adaptive": the coordinator's settings, target-only, fixed
// k=4, adaptive up to 8, adaptive with the coordinator's cap.
absl::Status ParseSpecMix(const std::string& s, LoadSpec* spec);
std::string FormatRange(const IntRange& r);

struct LoadSpec {
  std::string coordinator;
  std::string api_key, tls_ca;  // a secured coordinator's key and TLS roots
  int concurrency = 4;
  int64_t requests = 0;    // measured requests (0: until duration_s)
  double duration_s = 0;   // stop issuing new requests after this (0: no time bound)
  double drain_s = 30;     // requests still running this long after duration_s are cancelled
  double wait_serving_s = 0;  // wait this long for the coordinator to be serving first (0: don't wait)

  // The workload: a pool of request templates (prompt, max_tokens, stops).
  IntRange prompt_tokens{32, 256};  // synthesized prompt length in tokens (bos included)
  IntRange max_tokens{16, 128};
  std::vector<std::string> prompts;  // text prompts (e.g. --prompts-file); empty: synthesized
  int distinct_prompts = 16;         // templates synthesized (ignored with `prompts`: one per prompt)
  uint64_t seed = 1;                 // workload seed: prompts, lengths, mix
  bool ignore_eos = false;
  std::vector<std::string> stop;     // stop strings of a stop_fraction of the templates
  double stop_fraction = 0;

  // Sampling; request i uses seed sampling.seed + i.
  SamplingParams sampling;
  // Speculation, per request.
  std::optional<int> k;              // unset: the coordinator's k (with adaptive: the cap)
  std::optional<bool> adaptive;      // choose k per step (unset: fixed when k is set, else the coordinator's)
  bool disable_speculation = false;  // target-only
  float min_confidence = 0;          // 0: the coordinator's
  // A mix instead: each request draws one of these (overrides the three above).
  struct SpecMode {
    std::optional<int> k;
    std::optional<bool> adaptive;
    bool disable = false;
  };
  std::vector<SpecMode> spec_mix;

  // Requests that end early on purpose (the soak test's mix).
  double cancel_fraction = 0;        // cancelled by the client after some chunks
  IntRange cancel_after_chunks{1, 4};
  double deadline_fraction = 0;      // given a short deadline, drawn from deadline_ms
  IntRange deadline_ms{500, 500};

  int request_timeout_ms = 300000;   // bound on every call (a final status always comes)
  int warmup_requests = 0;           // run first, not measured
  bool verify_greedy = false;        // needs temperature 0
  bool keep_records = false;         // fill LoadReport::records
  std::function<void(const std::string&)> log;  // progress lines (optional)
};

struct Percentiles {
  int64_t n = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};
// Nearest-rank-with-interpolation percentiles (q in [0, 1]) of unsorted values.
double Percentile(std::vector<double> v, double q);
Percentiles Summarize(const std::vector<double>& v);

// One request as the client saw it.
struct RequestRecord {
  int64_t index = 0;
  int tmpl = 0;
  bool cancel_planned = false, deadline_planned = false;
  std::string code = "OK";        // absl status code name
  std::string error;              // message when not OK
  std::string finish_reason;      // from the summary (OK only)
  int prompt_tokens = 0;          // the template's (token prompts), else the summary's
  int output_tokens = 0;          // streamed
  int chunks = 0;
  double ttft_s = -1, total_s = 0;
  double queue_s = 0;             // server side, from the summary (OK only)
  std::vector<int32_t> tokens;
  std::string text;
  bool expected = true;           // OK, or the planned early end
  int verify = 0;                 // 0 not checked, 1 equal, -1 mismatch
};

struct LoadReport {
  int64_t sent = 0;       // measured requests started
  int64_t finished = 0;   // of those, with a final status
  int64_t lost = 0;       // sent - finished (must be 0)
  int64_t ok = 0;         // status OK
  int64_t cancelled_planned = 0, deadline_planned = 0;  // ended early as planned
  int64_t aborted = 0;    // cancelled at the end of the time bound (drain_s)
  int64_t failed = 0;     // any other non-OK status
  int64_t rejected = 0;   // of those, RESOURCE_EXHAUSTED (the coordinator's queue was full)
  std::map<std::string, int64_t> by_code;    // status code name -> requests
  std::map<std::string, int64_t> by_finish;  // finish reason -> OK requests
  std::vector<std::string> failure_examples; // first few unexpected errors
  int64_t warmup = 0, references = 0, reference_failures = 0;
  int64_t rpcs = 0;       // Generate calls made in all: warmup + references + sent

  double wall_s = 0;
  int64_t prompt_tokens = 0, output_tokens = 0;
  double output_tokens_per_s = 0, requests_per_s = 0;
  Percentiles ttft_ms, itl_ms, tpot_ms, total_ms;  // itl: per token (chunk gap / its tokens)
  Percentiles queue_ms;  // server side: waiting for admission (completed requests)

  int64_t proposed = 0, accepted = 0, spec_steps = 0, spec_appended = 0, steps = 0;
  double acceptance_rate = 0, mean_accepted_length = 0;
  double mean_k = 0;                 // drafts asked for per step
  std::vector<int64_t> k_histogram;  // steps by drafts verified (index 0: target-only steps)

  bool verified = false;
  int64_t verify_checked = 0, verify_mismatches = 0;
  std::vector<std::string> mismatch_examples;

  std::vector<RequestRecord> records;  // with keep_records, in index order
  // With keep_records: each template's prompt ids (synthesized prompts),
  // max_tokens and stops, and its reference output (verify_greedy).
  struct TemplateInfo {
    std::vector<int32_t> prompt;
    int max_tokens = 0;
    std::vector<std::string> stop;
    bool reference_ok = false;
    std::vector<int32_t> reference;
    std::string reference_text;
  };
  std::vector<TemplateInfo> templates;
};

// Runs the load against spec.coordinator. Errors only for a bad spec or when
// the templates cannot be built (e.g. the coordinator cannot tokenize);
// request failures are counted.
absl::StatusOr<LoadReport> RunLoad(const LoadSpec& spec);
// The same against any generator (e.g. one in process); spec.coordinator
// and wait_serving_s are not used.
absl::StatusOr<LoadReport> RunLoad(const LoadSpec& spec, api::Generator& gen);

// The workload's prompt text: `words` words from a fixed list, by seed.
std::string SynthesizeText(uint64_t seed, int words);
// Text of about `tokens` tokens cut to exactly that many ids, given a tokenizer.
absl::StatusOr<std::vector<int32_t>> SynthesizePrompt(
    uint64_t seed, int tokens, const std::function<absl::StatusOr<std::vector<int32_t>>(const std::string&)>& tokenize);

std::string FormatReport(const LoadReport& r);
std::string ReportToJson(const LoadReport& r, const LoadSpec& spec);

}  // namespace specd::loadgen
