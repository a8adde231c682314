// specd's one request API: a transport-neutral request and the stream of
// events that answers it. Every way in is a thin adapter over it:
//
//   Generator            the interface: Generate(request, on_event) -> summary
//     LocalGenerator     in process, on engines (common/api/local_generator.h)
//     Frontend           the coordinator (coordinator/frontend.h); its gRPC
//                        service and its OpenAI-compatible HTTP API adapt it
//     client::Client     a remote coordinator over gRPC (coordinator/client)
//
// so `specd generate`, `loadgen`, the gRPC Coordinator service and the HTTP
// API all speak Request / Event / Summary, and the checks, prompt building and
// speculation settings below are written once for every generator.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/spec/chain.h"
#include "common/spec/loop.h"
#include "common/spec/ngram.h"
#include "common/spec/warmup.h"
#include "common/sampler/sampler.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/config.h"
#include "common/util/status.h"

namespace specd::api {

// Limits every generator enforces on a request.
constexpr int kMaxStops = 16;
constexpr size_t kMaxStopBytes = 256;
constexpr int kMaxK = 64;

// Where a request's proposals come from: the draft model, n-gram lookup over
// prompt + output (common/spec/ngram.h; no model, no draft worker needed), or
// n-gram lookup where it finds a match and the draft otherwise.
enum class ProposerKind { kDraft, kNgram, kNgramDraft };
const char* ProposerName(ProposerKind k);  // "draft", "ngram", "ngram+draft"
absl::StatusOr<ProposerKind> ParseProposer(std::string_view name);

struct Request {
  std::string prompt;                  // text, tokenized with the target's vocabulary ...
  std::vector<int32_t> prompt_tokens;  // ... or token ids (used when non-empty)
  bool add_special = true;             // bos before a text prompt
  bool parse_special = false;          // control tokens written in the prompt text
  std::vector<ChatMessage> messages;   // non-empty: a chat, rendered with the model's template
  int max_tokens = 0;                  // 0: the generator's default
  SamplingParams sampling;             // includes logprobs (-1: none)
  std::vector<std::string> stop;       // generation ends before the first occurrence
  bool ignore_eos = false;             // keep generating past end-of-generation tokens
  // Speculation. Unset fields take the generator's settings; k without
  // adaptive asks for a fixed k, adaptive with k makes k the cap.
  std::optional<int> k;
  std::optional<bool> adaptive;
  bool disable_speculation = false;    // target-only
  float min_confidence = 0.0f;         // the draft stops below this top probability (0: the generator's)
  std::optional<ProposerKind> proposer;  // unset: the generator's
  Deadline deadline = kNoDeadline;     // the request ends with finish reason "deadline" around then
  std::function<bool()> cancelled;     // polled between steps (the caller went away)
};

// A deadline `d` from now.
inline Deadline After(std::chrono::milliseconds d) { return std::chrono::system_clock::now() + d; }

// One verify step's output and figures.
struct Event {
  std::string text;                    // UTF-8, never cut inside a character
  std::vector<int32_t> token_ids;      // tokens emitted by this step
  std::vector<TokenLogprob> logprobs;  // per token, when the request asked
  int k = 0;                           // drafts asked for
  int proposed = 0, accepted = 0, appended = 0, emitted = 0;
  bool draft_used = false;
};
using EventFn = std::function<bool(const Event&)>;  // false: cancel the request

struct Summary {
  FinishReason finish_reason = FinishReason::kNone;  // eos, stop, length, deadline
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int steps = 0;
  int speculative_steps = 0;
  int64_t proposed = 0;
  int64_t accepted = 0;
  double acceptance_rate = 0;
  double mean_accepted_length = 0;  // tokens decided per speculative step
  double tokens_per_second = 0;
  double elapsed_seconds = 0;
  int draft_failures = 0;
  std::string stop;                        // the stop string that ended it
  double queue_seconds = 0;                // waiting for admission
  double time_to_first_token_seconds = 0;  // arrival to the first token
  double prefill_seconds = 0;
  std::vector<int64_t> k_histogram;        // steps by drafts verified (index 0: target-only)
  bool adaptive = false;
  StepTimes step_time;                     // the steps taken apart (summed over `steps`)
  StepTimes step_time_speculative;         // the speculative steps' share (over `speculative_steps`)
  int pipelined_steps = 0;                 // steps whose verify took the proposal from the exchange buffer
  // Everything streamed, concatenated.
  std::string text;
  std::vector<int32_t> tokens;
  int chunks = 0;
  // Drafts verified per step, averaged.
  double MeanK() const;
};

class Generator {
 public:
  virtual ~Generator() = default;
  // Runs `req` to its end, one Event per step. A request that cannot run is
  // an error status (INVALID_ARGUMENT, UNAVAILABLE, RESOURCE_EXHAUSTED,
  // CANCELLED when on_event returned false or `cancelled` said so, ...).
  virtual absl::StatusOr<Summary> Generate(const Request& req, const EventFn& on_event = {}) = 0;
  virtual absl::StatusOr<std::vector<int32_t>> Tokenize(const std::string& text, bool add_special = true,
                                                        bool parse_special = false) = 0;
};

// ---- the pieces every generator shares

struct Limits {
  int default_max_tokens = 256;
  int max_tokens_limit = 8192;
};
// Checks what needs no model; returns the request's max_tokens (the default
// when unset). INVALID_ARGUMENT names the field.
absl::StatusOr<int> Check(const Request& req, const Limits& limits);

// The prompt's token ids: the chat template rendered and tokenized, the ids
// given (checked against the vocabulary), or the text tokenized. It must
// leave room for one generated token in `context` positions.
absl::StatusOr<std::vector<int32_t>> EncodePrompt(const Request& req, const Tokenizer& tok, int context);

// A generator's speculation settings, and what a request makes of them.
struct SpecDefaults {
  int k = 4;
  bool enabled = true;
  bool adaptive = true;
  int draft_max = 8;
  float min_confidence = -1.0f;  // < 0: 0 in fixed mode, learned in adaptive mode
  ProposerKind proposer = ProposerKind::kDraft;
  NgramOptions ngram;
  // Before the first request, run each step shape (WarmUp, common/spec/warmup.h).
  WarmupMode warmup = WarmupMode::kAuto;
};
struct SpecChoice {
  bool adaptive = false;
  int k = 0;          // fixed k, or adaptive's starting k; 0: target-only
  int draft_max = 0;  // adaptive's cap
  bool follow_live = false;  // the generator's live k applies (no per-request k)
  float min_confidence = -1.0f;
  ProposerKind proposer = ProposerKind::kDraft;
};
SpecChoice ChooseSpeculation(const Request& req, const SpecDefaults& d);

// The flags that set a generator's proposer (--proposer, --ngram-min,
// --ngram-max; the coordinator, generate and bench-spec), and reading them
// (INVALID_ARGUMENT for an unknown proposer or bad sizes).
void AddProposerFlags(Config* c);
absl::Status ProposerFromFlags(const Config& c, SpecDefaults* d);

// One request's proposer, made of the generator's draft (null: none) as the
// choice says: the draft alone, n-gram lookup alone, or the chain of both
// (n-gram first). get() is null when the request has no proposer (the draft
// alone without a draft): target-only.
class RequestProposer {
 public:
  RequestProposer(ProposerKind kind, const NgramOptions& ngram, Proposer* draft);
  RequestProposer(const RequestProposer&) = delete;
  RequestProposer& operator=(const RequestProposer&) = delete;
  Proposer* get() { return p_; }
  // Proposals without a model only: the step costs and acceptance are not the draft's.
  bool ngram_only() const { return p_ == &ngram_; }

 private:
  NgramProposer ngram_;
  std::optional<ProposerChain> chain_;
  Proposer* p_ = nullptr;
};

// The step costs requests with n-gram proposals alone share start here: their
// drafts cost no forwards (the lookup is the step's overhead), so the adaptive
// policy weighs verify costs, overhead and acceptance alone. (Kept apart from
// the draft's costs and acceptance, which are another proposer's.)
void SeedModelFreeCosts(SpecCosts* c);

// The loop's request for `req` (seq, costs, prior, live_k and the retry
// back-off are the generator's to add).
SpecRequest ToSpecRequest(const Request& req, std::vector<int32_t> prompt, int max_tokens, const SpecChoice& c,
                          int context);
Event ToEvent(const StepEvent& ev);
// The summary of a finished loop (queue and first-token times are the caller's).
Summary ToSummary(const SpecResult& r, int prompt_tokens, bool adaptive);

// "42 tokens in 1.20 s (35.0 tok/s), finish: eos; acceptance 71.4% (30/42), mean accepted length 3.50 ..."
std::string FormatSummary(const Summary& s);

}  // namespace specd::api
