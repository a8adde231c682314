#include "common/spec/warmup.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace specd {

std::vector<int> WarmupSchedule(int k_max) {
  std::vector<int> s;
  for (int k = 0; k <= std::max(k_max, 0); ++k) s.insert(s.end(), {k, k, k});
  return s;
}

namespace {
// A step appends at most k + 1 tokens; 8 spare.
int StepTokens(const std::vector<int>& schedule) {
  int n = 8;
  for (int k : schedule) n += k + 1;
  return n;
}
constexpr int kTextTokens = 64;  // the warm-up text's tokens, at most, in any vocabulary worth serving
}  // namespace

absl::StatusOr<WarmupMode> ParseWarmupMode(std::string_view s) {
  if (s == "auto") return WarmupMode::kAuto;
  if (s == "always") return WarmupMode::kAlways;
  if (s == "off") return WarmupMode::kOff;
  return absl::InvalidArgumentError(absl::StrCat("--warmup must be auto, always or off, not '", std::string(s), "'"));
}

int64_t WarmupPositions(const WarmupOptions& o) {
  const int64_t n = std::max(o.prompt_tokens, kTextTokens) + StepTokens(WarmupSchedule(o.k_max)) + 1;
  return o.max_context > 0 ? std::min<int64_t>(n, o.max_context) : n;
}

std::string WarmupReport::ToString() const {
  const auto [lo, hi] = lengths.empty() ? std::pair<int, int>{0, 0}
                                        : std::pair<int, int>{*std::min_element(lengths.begin(), lengths.end()),
                                                              *std::max_element(lengths.begin(), lengths.end())};
  return absl::StrFormat("%d requests of a %d-token prompt, %d steps, lengths %d..%d, %.2f s", requests, prompt_tokens,
                         steps, lo, hi, seconds);
}

WarmupReport WarmUp(const Tokenizer& tok, Verifier& target, Proposer* draft, const WarmupOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  WarmupReport rep;
  const std::vector<int> schedule = WarmupSchedule(draft ? o.k_max : 0);
  // Ordinary text (any ids would do; these decode).
  std::vector<int32_t> text = tok.Encode("The history of the city begins with a small harbour", true, false);
  if (text.empty()) text = {0};
  const int budget = StepTokens(schedule);
  int length = std::max(o.prompt_tokens, static_cast<int>(text.size()));
  if (o.max_context > 0) length = std::max(1, std::min(length, o.max_context - budget - 1));
  // The text, then its words again (from its second token: no second bos) up to `length`.
  std::vector<int32_t> prompt;
  const size_t again = text.size() > 1 ? 1 : 0;
  for (size_t i = 0; static_cast<int>(prompt.size()) < length; i = i + 1 < text.size() ? i + 1 : again)
    prompt.push_back(text[i]);
  rep.prompt_tokens = length;

  SamplingParams sampled;
  sampled.temperature = 1.0f;
  sampled.seed = 1;
  for (const SamplingParams& sp : {SamplingParams{}, sampled}) {
    if (o.cancelled && o.cancelled()) break;
    SpecCosts own;
    SpecRequest r;
    r.seq = o.seq;
    r.prompt = prompt;
    r.sampling = sp;
    r.max_tokens = budget;
    r.ignore_eos = true;
    r.costs = o.costs && sp.greedy() ? o.costs : &own;
    r.max_context = o.max_context;
    r.deadline = o.deadline;
    r.pipeline_verify = o.pipeline_verify;
    r.cancelled = o.cancelled;
    r.draft_retry = std::chrono::milliseconds(0);
    size_t step = 0;
    r.live_k = [&] { return schedule[std::min(step, schedule.size() - 1)]; };
    const SpecResult res = RunSpeculative(r, tok, target, draft, [&](const StepEvent& ev) {
      rep.lengths.push_back(ev.proposed);
      return ++step < schedule.size();
    });
    ++rep.requests;
    rep.steps += res.stats.steps;
    if (!rep.status.ok()) continue;
    if (res.reason == FinishReason::kError) rep.status = res.status;
    if (res.reason == FinishReason::kDeadline) rep.status = absl::DeadlineExceededError("the warm-up ran past its deadline");
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace specd
