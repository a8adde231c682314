#include "common/engine/spec_bench.h"

#include <algorithm>
#include <chrono>

namespace specd {

BenchMode BenchMode::TargetOnly() { return BenchMode{"target-only", 0, false, 0, 0.0f}; }

BenchMode BenchMode::Fixed(int k) { return BenchMode{absl::StrCat("k=", k), k, false, k, 0.0f}; }

BenchMode BenchMode::Adaptive(int draft_max, float min_confidence) {
  return BenchMode{absl::StrCat("adaptive<=", draft_max), std::min(4, draft_max), true, draft_max, min_confidence};
}

double BenchResult::MeanK() const {
  int64_t w = 0, n = 0;
  for (size_t k = 0; k < k_hist.size(); ++k) {
    w += static_cast<int64_t>(k) * k_hist[k];
    n += k_hist[k];
  }
  return n ? static_cast<double>(w) / n : 0.0;
}

double BenchResult::TokensPerSecond(const std::string& label) const {
  double tokens = 0, secs = 0;
  for (const BenchPromptResult& p : prompts) {
    if (p.label != label) continue;
    tokens += static_cast<double>(p.output.size());
    secs += p.stats.elapsed_seconds;
  }
  return secs > 0 ? tokens / secs : 0.0;
}

absl::StatusOr<BenchResult> RunSpecBench(const BenchPair& pair, const std::vector<BenchPrompt>& prompts,
                                         const BenchMode& mode, SpecCosts* costs, const SpecCosts* pricing) {
  if (!pricing) pricing = costs;
  if (!pair.target || !pair.tokenizer) return absl::InvalidArgumentError("bench needs a target and its tokenizer");
  if (mode.uses_draft() && !pair.proposing())
    return absl::InvalidArgumentError(absl::StrCat(mode.name, " needs a draft"));
  BenchResult res;
  res.mode = mode.name;
  // Each run learns the pair's acceptance from nothing, over its own prompts.
  AcceptancePrior prior;
  const CostTable table = pricing ? pricing->Table(std::max(mode.draft_max, mode.k)) : CostTable{};
  auto price = [&](const StepEvent& ev) {
    if (table.known) {
      res.modeled_seconds +=
          (ev.draft_used ? table.Step(ev.forwards, ev.proposed) : table.TargetOnly()) + table.Resume(ev.caught_up);
    }
    return true;
  };
  for (const BenchPrompt& p : prompts) {
    SpecRequest req;
    req.seq = 1;
    req.prompt = p.tokens;
    req.sampling = p.sampling;
    req.max_tokens = p.max_tokens;
    req.ignore_eos = p.ignore_eos;
    req.k = mode.k;
    req.min_confidence = mode.min_confidence;
    req.policy.adaptive = mode.adaptive;
    req.policy.draft_max = mode.draft_max;
    req.costs = costs;
    req.prior = &prior;
    req.max_context = pair.target->engine()->options().max_seq_len;
    SpecResult r = RunSpeculative(req, *pair.tokenizer, *pair.target, mode.uses_draft() ? pair.proposing() : nullptr, price);
    if (!r.status.ok()) return absl::Status(r.status.code(), absl::StrCat(mode.name, ": ", r.status.message()));
    res.tokens += static_cast<int64_t>(r.tokens.size());
    res.seconds += r.stats.elapsed_seconds;
    res.prefill_seconds += r.stats.prefill_seconds;
    res.draft_seconds += r.stats.draft_seconds;
    res.verify_seconds += r.stats.verify_seconds;
    res.time.Add(r.stats.time);
    res.steps += r.stats.steps;
    res.speculative_steps += r.stats.speculative_steps;
    res.proposed += r.stats.proposed;
    res.accepted += r.stats.accepted;
    res.spec_appended += r.stats.spec_appended;
    if (res.k_hist.size() < r.stats.k_hist.size()) res.k_hist.resize(r.stats.k_hist.size(), 0);
    for (size_t k = 0; k < r.stats.k_hist.size(); ++k) res.k_hist[k] += r.stats.k_hist[k];
    res.prompts.push_back(BenchPromptResult{p.label, std::move(r.tokens), r.stats});
  }
  res.acceptance_prior = prior.ToString();
  return res;
}

absl::Status CalibrateCosts(const BenchPair& pair, const std::vector<int32_t>& prompt, int k_max, int reps,
                            SpecCosts* costs) {
  if (!pair.target || !pair.draft) return absl::InvalidArgumentError("calibration needs a target and a draft");
  if (prompt.empty()) return absl::InvalidArgumentError("calibration needs a prompt");
  k_max = std::clamp(k_max, 1, std::min(pair.draft->k_max(), SpecCosts::kMaxLen));
  reps = std::max(reps, 1);
  constexpr int32_t kSeq = 0x7ffffff0;
  const SamplingParams greedy;
  SPECD_RETURN_IF_ERROR(pair.target->OpenSeq(kSeq, prompt, greedy));
  if (absl::Status st = pair.draft->OpenSeq(kSeq, prompt, greedy); !st.ok()) {
    pair.target->ReleaseSeq(kSeq);
    return st;
  }
  std::vector<int32_t> committed = prompt;
  int64_t synced = static_cast<int64_t>(prompt.size());
  const int64_t max_len = std::min(pair.target->engine()->options().max_seq_len,
                                   pair.draft->engine()->options().max_seq_len);
  std::vector<std::vector<double>> draft_t(static_cast<size_t>(k_max) + 1), verify_t(static_cast<size_t>(k_max) + 1);
  // The forward costs the workers report, as the loop feeds them to SpecCosts.
  auto draft_secs = [](const Proposal& p) { return p.figures.forward_seconds; };
  auto verify_secs = [](const Verdict& v) { return v.figures.forward_seconds + v.figures.accept_seconds; };
  absl::Status st;
  for (int rep = -1; rep < reps && st.ok(); ++rep) {  // rep -1: warm-up, not recorded
    for (int k = 0; k <= k_max && st.ok(); ++k) {
      if (static_cast<int64_t>(committed.size()) + k + 2 >= max_len) {
        st = absl::OutOfRangeError("calibration ran out of context; use a shorter prompt or a larger --max-seq-len");
        break;
      }
      Proposal prop;
      if (k > 0) {
        const std::vector<int32_t> fresh(committed.begin() + synced, committed.end());
        auto p = pair.draft->Propose({kSeq, synced, fresh, k, 0.0f}, kNoDeadline);
        if (!p.ok()) {
          st = p.status();
          break;
        }
        synced = static_cast<int64_t>(committed.size());
        prop = *std::move(p);
        if (rep >= 0) draft_t[static_cast<size_t>(k)].push_back(draft_secs(prop));
      }
      auto v = pair.target->Verify(kSeq, prop.tokens, prop.ref, {}, kNoDeadline);
      if (!v.ok()) {
        st = v.status();
        break;
      }
      if (rep >= 0) verify_t[static_cast<size_t>(static_cast<int>(prop.tokens.size()))].push_back(verify_secs(*v));
      committed.insert(committed.end(), v->appended.begin(), v->appended.end());
    }
  }
  // Resuming: a proposal of one token after `gap` target-only steps, against
  // a proposal of one token right after another (draft_t[1]).
  constexpr int kGaps[] = {8, 32};
  std::vector<std::vector<double>> resume_t(std::size(kGaps));
  for (int rep = 0; rep < reps && st.ok(); ++rep) {
    for (size_t g = 0; g < std::size(kGaps) && st.ok(); ++g) {
      if (static_cast<int64_t>(committed.size()) + kGaps[g] + 3 >= max_len) break;  // no room: not measured
      for (int i = 0; i < kGaps[g] && st.ok(); ++i) {
        auto v = pair.target->Verify(kSeq, {}, ExchangeRef{}, {}, kNoDeadline);
        if (!v.ok()) st = v.status();
        else committed.insert(committed.end(), v->appended.begin(), v->appended.end());
      }
      if (!st.ok()) break;
      const std::vector<int32_t> fresh(committed.begin() + synced, committed.end());
      auto p = pair.draft->Propose({kSeq, synced, fresh, 1, 0.0f}, kNoDeadline);
      if (!p.ok()) {
        st = p.status();
        break;
      }
      resume_t[g].push_back(draft_secs(*p));
      synced = static_cast<int64_t>(committed.size());
      auto v = pair.target->Verify(kSeq, p->tokens, p->ref, {}, kNoDeadline);
      if (!v.ok()) st = v.status();
      else committed.insert(committed.end(), v->appended.begin(), v->appended.end());
    }
  }
  pair.target->ReleaseSeq(kSeq);
  pair.draft->ReleaseSeq(kSeq);
  SPECD_RETURN_IF_ERROR(st);
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  for (int k = 0; k <= k_max; ++k) {
    if (!verify_t[static_cast<size_t>(k)].empty()) costs->ObserveVerify(k, median(verify_t[static_cast<size_t>(k)]));
    if (!draft_t[static_cast<size_t>(k)].empty()) costs->ObserveDraft(k, median(draft_t[static_cast<size_t>(k)]));
  }
  for (size_t g = 0; g < std::size(kGaps); ++g) {
    if (!resume_t[g].empty() && !draft_t[1].empty())
      costs->ObserveResume(kGaps[g], median(resume_t[g]) - median(draft_t[1]));
  }
  return absl::OkStatus();
}

BenchResult MedianRun(std::vector<BenchResult> runs) {
  if (runs.empty()) return BenchResult{};
  std::sort(runs.begin(), runs.end(), [](const BenchResult& a, const BenchResult& b) { return a.seconds < b.seconds; });
  return std::move(runs[runs.size() / 2]);
}

}  // namespace specd
