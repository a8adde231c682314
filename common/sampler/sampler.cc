#include "common/sampler/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

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

void ProcessLogits(const float* logits, int vocab, const SamplingParams& p, std::span<const int32_t> recent,
                   TokenDist* out) {
  out->ids.clear();
  out->probs.clear();
  // Repetition penalty touches only the recent tokens, so work on a sparse copy.
  std::vector<std::pair<int32_t, float>> penalized;
  if (p.repetition_penalty != 1.0f && p.repetition_window > 0 && !recent.empty()) {
    const size_t start = recent.size() > static_cast<size_t>(p.repetition_window)
                             ? recent.size() - p.repetition_window
                             : 0;
    for (size_t i = start; i < recent.size(); ++i) {
      const int32_t id = recent[i];
      if (id < 0 || id >= vocab) continue;
      penalized.push_back({id, 0.0f});
    }
    std::sort(penalized.begin(), penalized.end());
    penalized.erase(std::unique(penalized.begin(), penalized.end(),
                                [](auto& a, auto& b) { return a.first == b.first; }),
                    penalized.end());
    for (auto& [id, v] : penalized) {
      const float l = logits[id];
      v = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    }
  }
  auto logit = [&](int32_t id) -> float {
    if (!penalized.empty()) {
      auto it = std::lower_bound(penalized.begin(), penalized.end(), std::make_pair(id, -INFINITY));
      if (it != penalized.end() && it->first == id) return it->second;
    }
    const float v = logits[id];
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

  // Only top-k and top-p need the candidates in order; plain temperature and
  // min-p sampling skip the O(V log V) sort (a 152k vocabulary is common).
  std::vector<int32_t> cand;
  const bool need_order = p.top_p < 1.0f || (p.top_k > 0 && p.top_k < vocab);
  if (need_order) {
    cand.resize(vocab);
    std::iota(cand.begin(), cand.end(), 0);
    auto better = [&](int32_t a, int32_t b) {
      const float la = logit(a), lb = logit(b);
      return la > lb || (la == lb && a < b);
    };
    if (p.top_k > 0 && p.top_k < vocab) {
      std::partial_sort(cand.begin(), cand.begin() + p.top_k, cand.end(), better);
      cand.resize(p.top_k);
    } else {
      std::sort(cand.begin(), cand.end(), better);
    }
  } else {
    cand.reserve(vocab);
    for (int i = 0; i < vocab; ++i) {
      if (std::isfinite(logit(i))) cand.push_back(i);
    }
    if (cand.empty()) cand.push_back(Argmax(logits, vocab));
  }
  double top = -INFINITY;
  for (int32_t id : cand) top = std::max(top, static_cast<double>(logit(id)));
  // Softmax at temperature, in double for stable sums.
  const double inv_t = 1.0 / static_cast<double>(p.temperature);
  std::vector<double> w(cand.size());
  double sum = 0;
  for (size_t i = 0; i < cand.size(); ++i) {
    const double l = static_cast<double>(logit(cand[i]));
    w[i] = std::isfinite(l) ? std::exp((l - top) * inv_t) : 0.0;
    sum += w[i];
  }
  if (!(sum > 0)) {  // everything -inf: fall back to the best token
    out->ids.push_back(Argmax(logits, vocab));
    out->probs.push_back(1.0f);
    return;
  }
  // top-p: smallest prefix (in order) with mass >= top_p, at least one token.
  size_t n = cand.size();
  if (p.top_p < 1.0f) {
    double acc = 0;
    for (size_t i = 0; i < cand.size(); ++i) {
      acc += w[i] / sum;
      if (acc >= p.top_p) {
        n = i + 1;
        break;
      }
    }
  }
  cand.resize(n);
  w.resize(n);
  // min-p: drop tokens under min_p x the top probability (the top has weight 1).
  if (p.min_p > 0.0f) {
    size_t m = 0;
    for (size_t i = 0; i < n; ++i) {
      if (w[i] >= static_cast<double>(p.min_p)) {
        cand[m] = cand[i];
        w[m] = w[i];
        ++m;
      }
    }
    n = m;
  }
  double kept = 0;
  for (size_t i = 0; i < n; ++i) kept += w[i];
  std::vector<std::pair<int32_t, float>> sel;
  sel.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const float pr = static_cast<float>(w[i] / kept);
    if (pr > 0.0f) sel.push_back({cand[i], pr});
  }
  std::sort(sel.begin(), sel.end());
  out->ids.reserve(sel.size());
  out->probs.reserve(sel.size());
  for (auto& [id, pr] : sel) {
    out->ids.push_back(id);
    out->probs.push_back(pr);
  }
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
