#include "cli/loadgen_lib.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/util/config.h"
#include "coordinator/client/client.h"
#include "nlohmann/json.hpp"

namespace specd::loadgen {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// splitmix64: the workload is a pure function of (seed, stream, index).
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class Rng {
 public:
  Rng(uint64_t seed, uint64_t stream, uint64_t index) : s_(Mix(Mix(seed ^ Mix(stream)) ^ Mix(index + 1))) {}
  uint64_t Next() { return s_ = Mix(s_); }
  double Uniform() { return static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0); }
  int In(const IntRange& r) {
    if (r.hi <= r.lo) return r.lo;
    return r.lo + static_cast<int>(Next() % static_cast<uint64_t>(r.hi - r.lo + 1));
  }
  bool Chance(double p) { return p > 0 && Uniform() < p; }

 private:
  uint64_t s_;
};

enum Stream : uint64_t { kPromptText = 1, kTemplate = 2, kRequest = 3 };

constexpr const char* kWords[] = {
    "the",     "of",      "and",     "a",      "to",      "in",      "is",      "you",     "that",    "it",
    "he",      "was",     "for",     "on",     "are",     "as",      "with",    "his",     "they",    "at",
    "be",      "this",    "have",    "from",   "or",      "one",     "had",     "by",      "word",    "but",
    "not",     "what",    "all",     "were",   "we",      "when",    "your",    "can",     "said",    "there",
    "use",     "an",      "each",    "which",  "she",     "do",      "how",     "their",   "if",      "will",
    "up",      "other",   "about",   "out",    "many",    "then",    "them",    "these",   "so",      "some",
    "her",     "would",   "make",    "like",   "him",     "into",    "time",    "has",     "look",    "two",
    "more",    "write",   "go",      "see",    "number",  "no",      "way",     "could",   "people",  "my",
    "than",    "first",   "water",   "been",   "call",    "who",     "oil",     "its",     "now",     "find",
    "long",    "down",    "day",     "did",    "get",     "come",    "made",    "may",     "part",    "over",
    "new",     "sound",   "take",    "only",   "little",  "work",    "know",    "place",   "year",    "live",
    "me",      "back",    "give",    "most",   "very",    "after",   "thing",   "our",     "just",    "name",
    "good",    "sentence","man",     "think",  "say",     "great",   "where",   "help",    "through", "much",
    "before",  "line",    "right",   "too",    "mean",    "old",     "any",     "same",    "tell",    "boy",
    "follow",  "came",    "want",    "show",   "also",    "around",  "form",    "three",   "small",   "set",
    "put",     "end",     "does",    "another","well",    "large",   "must",    "big",     "even",    "such",
    "because", "turn",    "here",    "why",    "ask",     "went",    "men",     "read",    "need",    "land",
    "different","home",   "us",      "move",   "try",     "kind",    "hand",    "picture", "again",   "change",
    "off",     "play",    "spell",   "air",    "away",    "animal",  "house",   "point",   "page",    "letter",
    "mother",  "answer",  "found",   "study",  "still",   "learn",   "should",  "world",   "river",   "story",
};
constexpr int kNumWords = sizeof(kWords) / sizeof(kWords[0]);

struct Template {
  std::string text;             // prompts from a file
  std::vector<int32_t> tokens;  // synthesized prompts
  int max_tokens = 0;
  std::vector<std::string> stop;
};

struct Reference {
  bool ok = false;
  std::vector<int32_t> tokens;
  std::string text;
};

struct Plan {
  int64_t index = 0;
  int tmpl = 0;
  bool cancel = false;
  int cancel_after = 0;
  bool deadline = false;
};

// Timing samples of one request, merged at the end.
struct Samples {
  std::vector<double> itl_ms;
};

api::Request ParamsFor(const LoadSpec& s, const Template& t, int64_t index, bool reference,
                                 const LoadSpec::SpecMode* mode = nullptr) {
  api::Request p;
  if (!t.tokens.empty()) p.prompt_tokens = t.tokens;
  else p.prompt = t.text;
  p.max_tokens = t.max_tokens;
  p.sampling = s.sampling;
  p.sampling.seed = s.sampling.seed + static_cast<uint64_t>(index);
  p.stop = t.stop;
  p.ignore_eos = s.ignore_eos;
  if (reference) {
    p.disable_speculation = true;
  } else if (mode) {
    p.k = mode->k;
    p.adaptive = mode->adaptive;
    p.disable_speculation = mode->disable;
    p.min_confidence = s.min_confidence;
  } else {
    p.k = s.k;
    p.adaptive = s.adaptive;
    p.disable_speculation = s.disable_speculation;
    p.min_confidence = s.min_confidence;
  }
  return p;
}

bool IsPrefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

std::string CodeName(absl::StatusCode c) { return absl::StatusCodeToString(c); }

}  // namespace

absl::StatusOr<IntRange> ParseRange(const std::string& in, int min_value, int max_value) {
  std::vector<std::string> parts = absl::StrSplit(in, ':');
  IntRange r;
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("bad range '", in, "': want N or A:B with ", min_value, " <= A <= B <= ", max_value));
  };
  if (parts.size() == 1) {
    if (!absl::SimpleAtoi(parts[0], &r.lo)) return bad();
    r.hi = r.lo;
  } else if (parts.size() == 2) {
    if (!absl::SimpleAtoi(parts[0], &r.lo) || !absl::SimpleAtoi(parts[1], &r.hi)) return bad();
  } else {
    return bad();
  }
  if (r.lo < min_value || r.hi > max_value || r.lo > r.hi) return bad();
  return r;
}

absl::Status ParseSpecMix(const std::string& in, LoadSpec* spec) {
  std::vector<LoadSpec::SpecMode> mix;
  for (const std::string& item : SplitList(in)) {
    const absl::string_view part = item;
    LoadSpec::SpecMode m;
    int k = 0;
    if (part == "default") {
    } else if (part == "off") {
      m.disable = true;
    } else if (part == "adaptive") {
      m.adaptive = true;
    } else if ((part[0] == 'k' || part[0] == 'a') && absl::SimpleAtoi(part.substr(1), &k) && k >= 0 && k <= 64) {
      m.k = k;
      m.adaptive = part[0] == 'a';
    } else {
      return absl::InvalidArgumentError(absl::StrCat("bad speculation mode '", std::string(part),
                                                     "' (default, off, adaptive, kN, aN)"));
    }
    mix.push_back(m);
  }
  spec->spec_mix = std::move(mix);
  return absl::OkStatus();
}

std::string FormatRange(const IntRange& r) {
  return r.lo == r.hi ? std::to_string(r.lo) : absl::StrCat(r.lo, ":", r.hi);
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  q = std::clamp(q, 0.0, 1.0);
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t i = static_cast<size_t>(std::floor(pos));
  const double frac = pos - static_cast<double>(i);
  if (i + 1 >= v.size()) return v.back();
  return v[i] + (v[i + 1] - v[i]) * frac;
}

Percentiles Summarize(const std::vector<double>& v) {
  Percentiles p;
  p.n = static_cast<int64_t>(v.size());
  if (v.empty()) return p;
  std::vector<double> s = v;
  std::sort(s.begin(), s.end());
  double sum = 0;
  for (double x : s) sum += x;
  p.mean = sum / static_cast<double>(s.size());
  p.p50 = Percentile(s, 0.50);
  p.p90 = Percentile(s, 0.90);
  p.p99 = Percentile(s, 0.99);
  p.max = s.back();
  return p;
}

std::string SynthesizeText(uint64_t seed, int words) {
  Rng rng(seed, kPromptText, 0);
  std::string out;
  for (int i = 0; i < words; ++i) {
    if (i > 0) out += (i % 12 == 11) ? ". " : " ";
    out += kWords[rng.Next() % kNumWords];
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> SynthesizePrompt(
    uint64_t seed, int tokens,
    const std::function<absl::StatusOr<std::vector<int32_t>>(const std::string&)>& tokenize) {
  if (tokens < 1) return absl::InvalidArgumentError("a prompt needs at least one token");
  // Words are one or more tokens: start at one word per token and grow.
  int words = std::max(1, tokens);
  for (int attempt = 0; attempt < 12; ++attempt) {
    auto ids = tokenize(SynthesizeText(seed, words));
    if (!ids.ok()) return ids.status();
    if (static_cast<int>(ids->size()) >= tokens) {
      ids->resize(static_cast<size_t>(tokens));
      return *ids;
    }
    if (ids->empty()) return absl::FailedPreconditionError("synthesized text tokenizes to nothing");
    words = words * 2;
  }
  return absl::FailedPreconditionError(absl::StrCat("could not synthesize a prompt of ", tokens, " tokens"));
}

absl::StatusOr<LoadReport> RunLoad(const LoadSpec& s) {
  if (s.coordinator.empty()) return absl::InvalidArgumentError("no coordinator address");
  SPECD_ASSIGN_OR_RETURN(auto cl, client::Client::Connect(s.coordinator, {s.api_key, s.tls_ca}));
  if (s.wait_serving_s > 0) {
    SPECD_RETURN_IF_ERROR(cl->WaitServing(std::chrono::milliseconds(static_cast<int64_t>(s.wait_serving_s * 1000))));
  }
  return RunLoad(s, *cl);
}

absl::StatusOr<LoadReport> RunLoad(const LoadSpec& s, api::Generator& c) {
  // ---- check the spec
  if (s.concurrency < 1 || s.concurrency > 4096) return absl::InvalidArgumentError("concurrency must be in [1, 4096]");
  if (s.requests <= 0 && s.duration_s <= 0)
    return absl::InvalidArgumentError("give a request count or a duration (or both)");
  if (s.requests < 0 || s.duration_s < 0 || s.drain_s < 0) return absl::InvalidArgumentError("negative bound");
  if (s.prompts.empty() && (s.distinct_prompts < 1 || s.prompt_tokens.lo < 1))
    return absl::InvalidArgumentError("need at least one prompt of at least one token");
  if (s.max_tokens.lo < 1) return absl::InvalidArgumentError("max_tokens must be at least 1");
  if (s.verify_greedy && !s.sampling.greedy())
    return absl::InvalidArgumentError("--verify-greedy needs temperature 0 (sampled output is only equal in distribution)");
  for (double f : {s.stop_fraction, s.cancel_fraction, s.deadline_fraction}) {
    if (!(f >= 0 && f <= 1)) return absl::InvalidArgumentError("fractions must be in [0, 1]");
  }
  if (s.stop_fraction > 0 && s.stop.empty()) return absl::InvalidArgumentError("stop_fraction without stop strings");
  if (s.cancel_fraction > 0 && s.cancel_after_chunks.lo < 1)
    return absl::InvalidArgumentError("cancel_after_chunks must be at least 1");
  if (s.deadline_fraction > 0 && (s.deadline_ms.lo < 1 || s.deadline_ms.hi < s.deadline_ms.lo))
    return absl::InvalidArgumentError("deadline_ms must be a positive range");
  if (s.request_timeout_ms < 1) return absl::InvalidArgumentError("request timeout must be positive");
  if (auto st = s.sampling.Validate(); !st.ok()) return st;
  auto log = [&](const std::string& m) {
    if (s.log) s.log(m);
  };


  // ---- templates
  std::vector<Template> tmpls;
  const int n_tmpl = s.prompts.empty() ? s.distinct_prompts : static_cast<int>(s.prompts.size());
  for (int i = 0; i < n_tmpl; ++i) {
    Rng rng(s.seed, kTemplate, static_cast<uint64_t>(i));
    Template t;
    const int plen = rng.In(s.prompt_tokens);
    t.max_tokens = rng.In(s.max_tokens);
    if (rng.Chance(s.stop_fraction)) t.stop = s.stop;
    if (s.prompts.empty()) {
      auto ids = SynthesizePrompt(Mix(s.seed) ^ Mix(static_cast<uint64_t>(i) + 77), plen,
                                  [&](const std::string& text) { return c.Tokenize(text, true, false); });
      if (!ids.ok()) return absl::Status(ids.status().code(), absl::StrCat("prompt synthesis: ", ids.status().message()));
      t.tokens = std::move(*ids);
    } else {
      t.text = s.prompts[static_cast<size_t>(i)];
      if (t.text.empty()) return absl::InvalidArgumentError(absl::StrCat("prompt ", i + 1, " is empty"));
    }
    tmpls.push_back(std::move(t));
  }

  LoadReport rep;
  const auto timeout = std::chrono::milliseconds(s.request_timeout_ms);

  // Runs `n` calls on `threads` threads; `fn(i)` makes call i.
  auto parallel = [](int threads, int64_t n, const std::function<void(int64_t)>& fn) {
    std::atomic<int64_t> next{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < std::max(1, threads); ++t) {
      ts.emplace_back([&] {
        for (int64_t i; (i = next.fetch_add(1)) < n;) fn(i);
      });
    }
    for (auto& t : ts) t.join();
  };

  // ---- warm-up (unmeasured)
  if (s.warmup_requests > 0) {
    log(absl::StrCat("warm-up: ", s.warmup_requests, " requests"));
    parallel(std::min(s.concurrency, s.warmup_requests), s.warmup_requests, [&](int64_t i) {
      api::Request p = ParamsFor(s, tmpls[static_cast<size_t>(i) % tmpls.size()], -1 - i, false);
      p.deadline = api::After(timeout);
      (void)c.Generate(p);
    });
    rep.warmup = s.warmup_requests;
  }

  // ---- references: target-only greedy output of each template
  std::vector<Reference> refs(tmpls.size());
  if (s.verify_greedy) {
    log(absl::StrCat("references: ", tmpls.size(), " target-only requests"));
    std::mutex mu;
    parallel(s.concurrency, static_cast<int64_t>(tmpls.size()), [&](int64_t i) {
      api::Request p = ParamsFor(s, tmpls[static_cast<size_t>(i)], 0, true);
      p.deadline = api::After(timeout);
      auto r = c.Generate(p);
      std::lock_guard<std::mutex> l(mu);
      if (r.ok()) {
        refs[static_cast<size_t>(i)] = {true, r->tokens, r->text};
      } else {
        ++rep.reference_failures;
        if (rep.failure_examples.size() < 5)
          rep.failure_examples.push_back(absl::StrCat("reference ", i, ": ", r.status().ToString()));
      }
    });
    rep.references = static_cast<int64_t>(tmpls.size());
    rep.verified = true;
  }

  // ---- the measured load
  log(absl::StrCat("load: concurrency ", s.concurrency, ", ",
                   s.requests > 0 ? absl::StrCat(s.requests, " requests") : std::string("no request bound"), ", ",
                   s.duration_s > 0 ? absl::StrFormat("%.1f s", s.duration_s) : std::string("no time bound")));
  std::mutex mu;
  std::vector<RequestRecord> records;
  std::vector<double> itl_all, ttft_all, tpot_all, total_all, queue_all;
  int64_t k_asked = 0;
  std::atomic<int64_t> next{0};
  std::atomic<bool> abort_running{false};
  const auto t0 = Clock::now();
  const auto stop_issuing = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s.duration_s));
  const auto abort_at = stop_issuing + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s.drain_s));
  std::atomic<int64_t> sent{0};

  auto worker = [&] {
    for (;;) {
      if (s.duration_s > 0 && Clock::now() >= stop_issuing) return;
      const int64_t i = next.fetch_add(1);
      if (s.requests > 0 && i >= s.requests) return;
      ++sent;
      Rng rng(s.seed, kRequest, static_cast<uint64_t>(i));
      Plan plan;
      plan.index = i;
      plan.tmpl = static_cast<int>(rng.Next() % tmpls.size());
      plan.cancel = rng.Chance(s.cancel_fraction);
      plan.cancel_after = rng.In(s.cancel_after_chunks);
      plan.deadline = !plan.cancel && rng.Chance(s.deadline_fraction);
      const int deadline_ms = rng.In(s.deadline_ms);
      const LoadSpec::SpecMode* mode =
          s.spec_mix.empty() ? nullptr : &s.spec_mix[rng.Next() % s.spec_mix.size()];
      const Template& t = tmpls[static_cast<size_t>(plan.tmpl)];
      api::Request p = ParamsFor(s, t, i, false, mode);
      p.deadline = api::After(plan.deadline ? std::chrono::milliseconds(deadline_ms) : timeout);

      RequestRecord rec;
      rec.index = i;
      rec.tmpl = plan.tmpl;
      rec.cancel_planned = plan.cancel;
      rec.deadline_planned = plan.deadline;
      Samples smp;
      bool aborted = false;
      int64_t proposed = 0, accepted = 0, spec_steps = 0, spec_appended = 0, steps = 0, asked = 0;
      std::vector<int64_t> khist;
      const auto start = Clock::now();
      auto last = start;
      bool have_token = false;
      double first_s = -1, last_s = 0;
      std::vector<int32_t> streamed;  // Generate returns the tokens only on success
      auto r = c.Generate(p, [&](const api::Event& ch) {
        const auto now = Clock::now();
        ++rec.chunks;
        ++steps;
        proposed += ch.proposed;
        accepted += ch.accepted;
        asked += ch.k;
        const size_t kb = static_cast<size_t>(std::clamp(ch.proposed, 0, 256));
        if (khist.size() <= kb) khist.resize(kb + 1);
        ++khist[kb];
        if (ch.proposed > 0) {
          ++spec_steps;
          spec_appended += ch.appended;
        }
        const int m = static_cast<int>(ch.token_ids.size());
        if (m > 0) {
          if (!have_token) {
            first_s = Seconds(now - start);
            have_token = true;
          } else {
            const double gap_ms = 1000.0 * Seconds(now - last) / m;
            for (int j = 0; j < m; ++j) smp.itl_ms.push_back(gap_ms);
          }
          last = now;
          last_s = Seconds(now - start);
          rec.output_tokens += m;
          if (s.verify_greedy || s.keep_records) streamed.insert(streamed.end(), ch.token_ids.begin(), ch.token_ids.end());
        }
        if (plan.cancel && rec.chunks >= plan.cancel_after) return false;
        if (abort_running.load()) {
          aborted = true;
          return false;
        }
        return true;
      });
      rec.total_s = Seconds(Clock::now() - start);
      rec.ttft_s = first_s;
      if (r.ok()) {
        rec.finish_reason = FinishReasonName(r->finish_reason);
        rec.prompt_tokens = r->prompt_tokens;
        rec.tokens = std::move(r->tokens);
        rec.text = std::move(r->text);
        rec.output_tokens = static_cast<int>(rec.tokens.size());
        rec.queue_s = r->queue_seconds;
      } else {
        rec.code = CodeName(r.status().code());
        rec.error = std::string(r.status().message());
        rec.prompt_tokens = static_cast<int>(t.tokens.size());
        rec.tokens = std::move(streamed);
        const auto code = r.status().code();
        rec.expected = (code == absl::StatusCode::kCancelled && (plan.cancel || aborted)) ||
                       (code == absl::StatusCode::kDeadlineExceeded && plan.deadline);
      }
      // A complete output must equal its reference; one that ended early
      // (cancelled, deadline) must be a prefix of it.
      if (s.verify_greedy && refs[static_cast<size_t>(plan.tmpl)].ok && rec.expected) {
        const Reference& ref = refs[static_cast<size_t>(plan.tmpl)];
        const bool complete = r.ok() && rec.finish_reason != "deadline" && rec.finish_reason != "cancelled";
        rec.verify = complete ? (rec.tokens == ref.tokens && rec.text == ref.text ? 1 : -1)
                              : (IsPrefix(rec.tokens, ref.tokens) ? 1 : -1);
      }
      std::lock_guard<std::mutex> l(mu);
      if (aborted) ++rep.aborted;
      if (have_token) {
        ttft_all.push_back(1000.0 * first_s);
        if (rec.output_tokens > 1 && last_s > first_s)
          tpot_all.push_back(1000.0 * (last_s - first_s) / (rec.output_tokens - 1));
      }
      if (rec.code == "OK") {
        total_all.push_back(1000.0 * rec.total_s);
        queue_all.push_back(1000.0 * rec.queue_s);
      }
      k_asked += asked;
      if (rep.k_histogram.size() < khist.size()) rep.k_histogram.resize(khist.size());
      for (size_t j = 0; j < khist.size(); ++j) rep.k_histogram[j] += khist[j];
      itl_all.insert(itl_all.end(), smp.itl_ms.begin(), smp.itl_ms.end());
      rep.proposed += proposed;
      rep.accepted += accepted;
      rep.spec_steps += spec_steps;
      rep.spec_appended += spec_appended;
      rep.steps += steps;
      if (!s.verify_greedy && !s.keep_records) {  // long runs: keep the figures, not the outputs
        rec.tokens = {};
        rec.text = {};
      }
      records.push_back(std::move(rec));
    }
  };
  std::atomic<int> done{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < s.concurrency; ++i) {
    ts.emplace_back([&] {
      worker();
      ++done;
    });
  }
  // Requests still running drain_s past the time bound are cancelled (at
  // their next chunk; one that never streams ends at its own timeout).
  while (done.load() < s.concurrency) {
    if (s.duration_s > 0 && Clock::now() >= abort_at) abort_running = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& t : ts) t.join();
  rep.wall_s = Seconds(Clock::now() - t0);

  // ---- the report
  std::sort(records.begin(), records.end(), [](const RequestRecord& a, const RequestRecord& b) { return a.index < b.index; });
  rep.sent = sent.load();
  rep.finished = static_cast<int64_t>(records.size());
  rep.lost = rep.sent - rep.finished;
  rep.rpcs = rep.warmup + rep.references + rep.sent;
  for (const RequestRecord& r : records) {
    ++rep.by_code[r.code];
    rep.prompt_tokens += r.prompt_tokens;
    rep.output_tokens += r.output_tokens;
    if (r.code == "OK") {
      ++rep.ok;
      ++rep.by_finish[r.finish_reason];
    } else if (r.expected) {
      if (r.code == "CANCELLED" && r.cancel_planned) ++rep.cancelled_planned;
      if (r.code == "DEADLINE_EXCEEDED") ++rep.deadline_planned;
    } else {
      ++rep.failed;
      if (r.code == "RESOURCE_EXHAUSTED") ++rep.rejected;
      if (rep.failure_examples.size() < 5)
        rep.failure_examples.push_back(absl::StrCat("request ", r.index, ": ", r.code, ": ", r.error));
    }
    if (r.verify != 0) ++rep.verify_checked;
    if (r.verify < 0) {
      ++rep.verify_mismatches;
      if (rep.mismatch_examples.size() < 5) {
        const Reference& ref = refs[static_cast<size_t>(r.tmpl)];
        size_t d = 0;
        while (d < r.tokens.size() && d < ref.tokens.size() && r.tokens[d] == ref.tokens[d]) ++d;
        rep.mismatch_examples.push_back(absl::StrCat("request ", r.index, " (template ", r.tmpl, ", finish ",
                                                     r.finish_reason, "): ", r.tokens.size(), " tokens vs ",
                                                     ref.tokens.size(), " in the reference, first difference at ", d));
      }
    }
  }
  rep.output_tokens_per_s = rep.wall_s > 0 ? static_cast<double>(rep.output_tokens) / rep.wall_s : 0;
  rep.requests_per_s = rep.wall_s > 0 ? static_cast<double>(rep.ok) / rep.wall_s : 0;
  rep.ttft_ms = Summarize(ttft_all);
  rep.itl_ms = Summarize(itl_all);
  rep.tpot_ms = Summarize(tpot_all);
  rep.total_ms = Summarize(total_all);
  rep.queue_ms = Summarize(queue_all);
  rep.mean_k = rep.steps ? static_cast<double>(k_asked) / static_cast<double>(rep.steps) : 0;
  rep.acceptance_rate = rep.proposed ? static_cast<double>(rep.accepted) / static_cast<double>(rep.proposed) : 0;
  rep.mean_accepted_length =
      rep.spec_steps ? static_cast<double>(rep.spec_appended) / static_cast<double>(rep.spec_steps) : 0;
  if (s.keep_records) {
    rep.records = std::move(records);
    for (size_t i = 0; i < tmpls.size(); ++i)
      rep.templates.push_back({tmpls[i].tokens, tmpls[i].max_tokens, tmpls[i].stop, refs[i].ok, refs[i].tokens, refs[i].text});
  }
  return rep;
}

std::string FormatReport(const LoadReport& r) {
  std::ostringstream os;
  os << absl::StrFormat("requests: %d sent, %d ok, %d failed", r.sent, r.ok, r.failed);
  if (r.rejected) os << absl::StrFormat(" (%d of them refused: queue full)", r.rejected);
  if (r.cancelled_planned) os << absl::StrFormat(", %d cancelled (planned)", r.cancelled_planned);
  if (r.deadline_planned) os << absl::StrFormat(", %d past their deadline (planned)", r.deadline_planned);
  if (r.aborted) os << absl::StrFormat(", %d cancelled at the time bound", r.aborted);
  if (r.lost) os << absl::StrFormat(", %d LOST", r.lost);
  os << "\n  by status:";
  for (const auto& [k, v] : r.by_code) os << " " << k << "=" << v;
  os << "\n  by finish:";
  for (const auto& [k, v] : r.by_finish) os << " " << k << "=" << v;
  os << "\n";
  os << absl::StrFormat("throughput: %.1f output tokens/s, %.2f requests/s (%d output, %d prompt tokens in %.2f s)\n",
                        r.output_tokens_per_s, r.requests_per_s, r.output_tokens, r.prompt_tokens, r.wall_s);
  auto row = [&](const char* name, const Percentiles& p) {
    os << absl::StrFormat("  %-22s p50 %9.2f  p90 %9.2f  p99 %9.2f  mean %9.2f  max %9.2f  (n=%d)\n", name, p.p50,
                          p.p90, p.p99, p.mean, p.max, p.n);
  };
  os << "latency (ms):\n";
  row("time to first token", r.ttft_ms);
  row("inter-token gap", r.itl_ms);
  row("time per output token", r.tpot_ms);
  row("request total (ok)", r.total_ms);
  row("queue wait (server)", r.queue_ms);
  if (r.proposed > 0)
    os << absl::StrFormat("speculation: acceptance %.1f%% (%d/%d), mean accepted length %.2f tokens/step, %d of %d steps speculative\n",
                          100.0 * r.acceptance_rate, r.accepted, r.proposed, r.mean_accepted_length, r.spec_steps,
                          r.steps);
  else
    os << absl::StrFormat("speculation: none (%d target-only steps)\n", r.steps);
  if (r.proposed > 0) {
    os << absl::StrFormat("  drafts asked per step: mean %.2f; steps by drafts verified:", r.mean_k);
    for (size_t j = 0; j < r.k_histogram.size(); ++j) {
      if (r.k_histogram[j]) os << " " << j << ":" << r.k_histogram[j];
    }
    os << "\n";
  }
  if (r.verified)
    os << absl::StrFormat("verify-greedy: %d outputs checked against %d target-only references: %d mismatches%s\n",
                          r.verify_checked, r.references, r.verify_mismatches,
                          r.reference_failures ? absl::StrFormat(" (%d references failed)", r.reference_failures)
                                               : std::string());
  for (const auto& e : r.failure_examples) os << "  failure: " << e << "\n";
  for (const auto& e : r.mismatch_examples) os << "  mismatch: " << e << "\n";
  return os.str();
}

namespace {
nlohmann::ordered_json PercentilesJson(const Percentiles& p) {
  return {{"n", p.n}, {"mean", p.mean}, {"p50", p.p50}, {"p90", p.p90}, {"p99", p.p99}, {"max", p.max}};
}
}  // namespace

std::string ReportToJson(const LoadReport& r, const LoadSpec& s) {
  using nlohmann::ordered_json;
  ordered_json spec = {{"coordinator", s.coordinator},
                       {"concurrency", s.concurrency},
                       {"requests", s.requests},
                       {"duration_s", s.duration_s},
                       {"prompt_tokens", FormatRange(s.prompt_tokens)},
                       {"max_tokens", FormatRange(s.max_tokens)},
                       {"distinct_prompts", s.prompts.empty() ? s.distinct_prompts : static_cast<int>(s.prompts.size())},
                       {"seed", s.seed},
                       {"temperature", s.sampling.temperature},
                       {"top_p", s.sampling.top_p},
                       {"top_k", s.sampling.top_k},
                       {"k", s.k ? ordered_json(*s.k) : ordered_json(nullptr)},
                       {"adaptive", s.adaptive ? ordered_json(*s.adaptive) : ordered_json(nullptr)},
                       {"disable_speculation", s.disable_speculation},
                       {"min_confidence", s.min_confidence},
                       {"ignore_eos", s.ignore_eos}};
  ordered_json j = {{"spec", spec},
                    {"sent", r.sent},
                    {"finished", r.finished},
                    {"lost", r.lost},
                    {"ok", r.ok},
                    {"failed", r.failed},
                    {"rejected", r.rejected},
                    {"cancelled_planned", r.cancelled_planned},
                    {"deadline_planned", r.deadline_planned},
                    {"aborted", r.aborted},
                    {"by_code", r.by_code},
                    {"by_finish", r.by_finish},
                    {"failure_examples", r.failure_examples},
                    {"warmup", r.warmup},
                    {"references", r.references},
                    {"reference_failures", r.reference_failures},
                    {"rpcs", r.rpcs},
                    {"wall_s", r.wall_s},
                    {"prompt_tokens", r.prompt_tokens},
                    {"output_tokens", r.output_tokens},
                    {"output_tokens_per_s", r.output_tokens_per_s},
                    {"requests_per_s", r.requests_per_s},
                    {"ttft_ms", PercentilesJson(r.ttft_ms)},
                    {"itl_ms", PercentilesJson(r.itl_ms)},
                    {"tpot_ms", PercentilesJson(r.tpot_ms)},
                    {"total_ms", PercentilesJson(r.total_ms)},
                    {"queue_ms", PercentilesJson(r.queue_ms)},
                    {"mean_k", r.mean_k},
                    {"k_histogram", r.k_histogram},
                    {"steps", r.steps},
                    {"spec_steps", r.spec_steps},
                    {"proposed", r.proposed},
                    {"accepted", r.accepted},
                    {"acceptance_rate", r.acceptance_rate},
                    {"mean_accepted_length", r.mean_accepted_length},
                    {"verified", r.verified},
                    {"verify_checked", r.verify_checked},
                    {"verify_mismatches", r.verify_mismatches},
                    {"mismatch_examples", r.mismatch_examples}};
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace specd::loadgen
