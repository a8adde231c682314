#include "common/sampler/sampler.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/sampler/select.h"

namespace specd {

absl::Status SamplingParams::Validate() const {
  if (!std::isfinite(temperature) || temperature > 100.0f)
    return absl::InvalidArgumentError(absl::StrCat("temperature ", temperature, " out of range [0, 100]"));
  if (top_k < 0) return absl::InvalidArgumentError(absl::StrCat("top_k ", top_k, " must be >= 0"));
  if (!(top_p > 0.0f && top_p <= 1.0f))
    return absl::InvalidArgumentError(absl::StrCat("top_p ", top_p, " must be in (0, 1]"));
  if (!(min_p >= 0.0f && min_p < 1.0f))
    return absl::InvalidArgumentError(absl::StrCat("min_p ", min_p, " must be in [0, 1)"));
  if (!(repetition_penalty >= 0.01f && repetition_penalty <= 100.0f))
    return absl::InvalidArgumentError(
        absl::StrCat("repetition_penalty ", repetition_penalty, " must be in [0.01, 100]"));
  if (repetition_window < 0 || repetition_window > 1 << 20)
    return absl::InvalidArgumentError(absl::StrCat("repetition_window ", repetition_window, " out of range"));
  if (logprobs < -1 || logprobs > kMaxTopLogprobs)
    return absl::InvalidArgumentError(absl::StrCat("logprobs ", logprobs, " out of range [0, ", kMaxTopLogprobs, "]"));
  return absl::OkStatus();
}

TokenLogprob LogprobOf(const float* logits, int vocab, int32_t token, int top_n) {
  double mx = -INFINITY;
  for (int i = 0; i < vocab; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  double z = 0;
  for (int i = 0; i < vocab; ++i) z += std::exp(static_cast<double>(logits[i]) - mx);
  const double log_z = mx + std::log(z);
  TokenLogprob out;
  out.token = token;
  out.logprob = static_cast<float>(static_cast<double>(logits[token]) - log_z);
  top_n = std::clamp(top_n, 0, vocab);
  if (top_n > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(vocab));
    for (int i = 0; i < vocab; ++i) ids[static_cast<size_t>(i)] = i;
    std::partial_sort(ids.begin(), ids.begin() + top_n, ids.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    for (int i = 0; i < top_n; ++i) {
      out.top_tokens.push_back(ids[static_cast<size_t>(i)]);
      out.top_logprobs.push_back(static_cast<float>(static_cast<double>(logits[ids[static_cast<size_t>(i)]]) - log_z));
    }
  }
  return out;
}

std::string SamplingParams::ToString() const {
  std::ostringstream os;
  if (greedy()) {
    os << "greedy";
  } else {
    os << "temperature=" << temperature << " top_k=" << top_k << " top_p=" << top_p << " min_p=" << min_p
       << " seed=" << seed;
  }
  if (repetition_penalty != 1.0f) os << " repetition_penalty=" << repetition_penalty;
  return os.str();
}

float TokenDist::Prob(int32_t id) const {
  auto it = std::lower_bound(ids.begin(), ids.end(), id);
  return (it != ids.end() && *it == id) ? probs[it - ids.begin()] : 0.0f;
}

int32_t Argmax(const float* logits, int n) {
  int32_t best = 0;
  float bv = -INFINITY;
  bool found = false;
  for (int i = 0; i < n; ++i) {
    const float v = logits[i];
    if (std::isnan(v)) continue;
    if (!found || v > bv) {
      bv = v;
      best = i;
      found = true;
    }
  }
  return best;
}

namespace {

// Runs a RadixSelect over `keys` (those <= within) with weights w (counting:
// weight 1 each) to `target`; returns its threshold.
uint64_t SelectThreshold(const std::vector<uint64_t>& keys, const std::vector<double>& w, double target,
                         bool counting, uint64_t within) {
  RadixSelect s = RadixSelect::Start();
  double weight[kSelectBuckets];
  uint32_t count[kSelectBuckets];
  while (!s.done()) {
    std::fill(std::begin(weight), std::end(weight), 0.0);
    std::fill(std::begin(count), std::end(count), 0u);
    for (size_t j = 0; j < keys.size(); ++j) {
      const uint64_t k = keys[j];
      if (k > within || !s.Matches(k)) continue;
      const int d = s.Digit(k);
      weight[d] += counting ? 1.0 : w[j];
      ++count[d];
    }
    s.Advance(weight, count, target, counting);
  }
  // A bucket's threshold may reach past `within` (keys not taken part in).
  return std::min(s.threshold, within);
}

// The row the rules see: `logits` with the repetition penalty applied once
// per distinct token of the window (a penalized copy in thread-local scratch;
// `logits` itself when nothing is penalized).
const float* PenalizedRow(const float* logits, int vocab, const SamplingParams& p, std::span<const int32_t> recent) {
  thread_local std::vector<std::pair<int32_t, float>> penalized;
  thread_local std::vector<float> row;
  penalized.clear();
  if (p.repetition_penalty == 1.0f || p.repetition_window <= 0 || recent.empty()) return logits;
  const size_t start =
      recent.size() > static_cast<size_t>(p.repetition_window) ? recent.size() - p.repetition_window : 0;
  for (size_t i = start; i < recent.size(); ++i) {
    const int32_t id = recent[i];
    if (id < 0 || id >= vocab) continue;
    penalized.push_back({id, 0.0f});
  }
  if (penalized.empty()) return logits;
  std::sort(penalized.begin(), penalized.end());
  penalized.erase(std::unique(penalized.begin(), penalized.end(),
                              [](auto& a, auto& b) { return a.first == b.first; }),
                  penalized.end());
  for (auto& [id, v] : penalized) {
    const float l = logits[id];
    v = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
  }
  row.assign(logits, logits + vocab);
  for (const auto& [id, v] : penalized) row[id] = v;
  return row.data();
}

}  // namespace

void ProcessLogits(const float* logits, int vocab, const SamplingParams& p, std::span<const int32_t> recent,
                   TokenDist* out) {
  out->ids.clear();
  out->probs.clear();
  // Scratch kept across calls: no allocation per token once warm.
  thread_local std::vector<int32_t> cand;
  thread_local std::vector<double> w;
  thread_local std::vector<uint64_t> keys;
  const float* src = PenalizedRow(logits, vocab, p, recent);
  auto logit = [&](int32_t id) -> float {
    const float v = src[id];
    return std::isnan(v) ? -INFINITY : v;
  };

  if (p.greedy()) {
    int32_t best = 0;
    float bv = -INFINITY;
    bool found = false;
    for (int i = 0; i < vocab; ++i) {
      const float v = logit(i);
      if (!found || v > bv) {
        bv = v;
        best = i;
        found = true;
      }
    }
    out->ids.push_back(best);
    out->probs.push_back(1.0f);
    return;
  }

  // Softmax weights at temperature, relative to the top logit (weight 1), in
  // double for stable sums.
  double top = -INFINITY;
  for (int i = 0; i < vocab; ++i) top = std::max(top, static_cast<double>(logit(i)));
  auto fallback = [&] {  // everything -inf: the best token
    out->ids.push_back(Argmax(logits, vocab));
    out->probs.push_back(1.0f);
  };
  if (!std::isfinite(top)) return fallback();
  const double inv_t = 1.0 / static_cast<double>(p.temperature);
  auto weight = [&](float v) { return std::isfinite(v) ? std::exp((static_cast<double>(v) - top) * inv_t) : 0.0; };
  const bool top_k = p.top_k > 0 && p.top_k < vocab, top_p = p.top_p < 1.0f;
  // The candidates, in id order: with top-k or top-p the ids at or above the
  // nearest cutoff below the top that holds enough of them (select.h), else
  // every id. Without top-k the weights of all ids are summed (in id order).
  const float ftop = static_cast<float>(top);
  float cut = -INFINITY;
  double sum = 0;
  if (top_k) {
    int count[kSelectCuts] = {};
    for (int i = 0; i < vocab; ++i) {
      const float v = logit(i);
      for (int c = 0; c < kSelectCuts; ++c) count[c] += v >= SelectCut(ftop, c);
    }
    for (int c = 0; c < kSelectCuts; ++c) {
      if (count[c] >= p.top_k) {
        cut = SelectCut(ftop, c);
        break;
      }
    }
  } else {
    double mass[kSelectCuts] = {};
    for (int i = 0; i < vocab; ++i) {
      const float v = logit(i);
      const double wi = weight(v);
      sum += wi;
      for (int c = 0; c < kSelectCuts; ++c) mass[c] += v >= SelectCut(ftop, c) ? wi : 0.0;
    }
    for (int c = 0; top_p && c < kSelectCuts; ++c) {
      if (mass[c] >= static_cast<double>(p.top_p) * sum) {
        cut = SelectCut(ftop, c);
        break;
      }
    }
  }
  cand.clear();
  w.clear();
  keys.clear();
  for (int i = 0; i < vocab; ++i) {
    const float v = logit(i);
    if (!(v >= cut)) continue;
    cand.push_back(i);
    w.push_back(weight(v));
    if (top_k || top_p) keys.push_back(OrderKey(v, i));
  }
  // top-k, then top-p over what top-k kept: thresholds in the sampler's
  // order (select.h), no sort.
  uint64_t thr = kSelectAll;
  auto in = [&](size_t j) { return thr == kSelectAll || keys[j] <= thr; };
  if (top_k) {
    thr = SelectThreshold(keys, w, static_cast<double>(p.top_k), /*counting=*/true, kSelectAll);
    for (size_t j = 0; j < cand.size(); ++j) sum += in(j) ? w[j] : 0.0;
  }
  if (!(sum > 0)) return fallback();
  // top-p: the fewest tokens from the front with mass >= top_p (at least one).
  if (top_p) thr = SelectThreshold(keys, w, static_cast<double>(p.top_p) * sum, /*counting=*/false, thr);
  // min-p: drop tokens under min_p x the top probability (the top has weight 1).
  const double min_w = static_cast<double>(p.min_p);
  auto kept_w = [&](size_t j) { return in(j) && w[j] >= min_w && w[j] > 0; };
  double kept = 0;
  for (size_t j = 0; j < cand.size(); ++j) {
    if (kept_w(j)) kept += w[j];
  }
  for (size_t j = 0; j < cand.size(); ++j) {
    if (!kept_w(j)) continue;
    const float pr = static_cast<float>(w[j] / kept);
    if (pr > 0.0f) {
      out->ids.push_back(cand[j]);
      out->probs.push_back(pr);
    }
  }
}

float Confidence(const float* raw, int vocab, const SamplingParams& p, std::span<const int32_t> recent,
                 const TokenDist& dist) {
  if (!p.greedy()) {
    float m = 0;
    for (float pr : dist.probs) m = std::max(m, pr);
    return m;
  }
  // Softmax at temperature 1 of the penalized row the greedy token was taken
  // from: float exponentials summed in double (a figure for the length
  // policy, not part of any decision about the output).
  const float* logits = PenalizedRow(raw, vocab, p, recent);
  float mx = -INFINITY;
  for (int i = 0; i < vocab; ++i) {
    if (logits[i] > mx) mx = logits[i];
  }
  if (!std::isfinite(mx)) return 0.0f;
  double z = 0;
  for (int i = 0; i < vocab; ++i) {
    if (!std::isnan(logits[i])) z += std::exp(logits[i] - mx);  // NaN counts as -inf, as everywhere in the sampler
  }
  return z > 0 ? static_cast<float>(1.0 / z) : 0.0f;
}

int32_t SampleDist(const TokenDist& dist, double u) {
  if (dist.ids.empty()) return 0;
  double total = 0;
  for (float pr : dist.probs) total += pr;
  const double target = u * total;
  double acc = 0;
  for (size_t i = 0; i < dist.ids.size(); ++i) {
    acc += dist.probs[i];
    if (target < acc) return dist.ids[i];
  }
  // Rounding left a sliver at the top: the last token with nonzero mass.
  for (size_t i = dist.ids.size(); i-- > 0;) {
    if (dist.probs[i] > 0) return dist.ids[i];
  }
  return dist.ids.back();
}

}  // namespace specd
