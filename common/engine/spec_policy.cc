#include "common/engine/spec_policy.h"

#include <algorithm>
#include <cstdio>

namespace specd {

// ---------------------------------------------------------------- SpecCosts

void SpecCosts::Add(std::vector<Cell>& cells, int i, double seconds) {
  if (i < 0 || i > kMaxLen || !(seconds >= 0)) return;
  std::lock_guard<std::mutex> l(mu_);
  if (frozen_) return;
  Cell& c = cells[static_cast<size_t>(i)];
  // One call stuck behind a long prefill must not make a length look
  // expensive for good: after two observations, outliers count as 4x.
  if (c.n >= 2) seconds = std::clamp(seconds, c.mean / 4, c.mean * 4);
  // Plain mean for the first observations, then an EWMA (costs drift with load).
  const double w = std::max(ewma_, 1.0 / static_cast<double>(c.n + 1));
  c.mean += w * (seconds - c.mean);
  ++c.n;
}

void SpecCosts::ObserveDraft(int forwards, double seconds) { Add(draft_, forwards, seconds); }
void SpecCosts::ObserveVerify(int drafted, double seconds) { Add(verify_, drafted, seconds); }

void SpecCosts::Freeze() {
  std::lock_guard<std::mutex> l(mu_);
  frozen_ = true;
}

std::optional<double> SpecCosts::Estimate(const std::vector<Cell>& cells, double x, bool proportional) {
  struct Pt {
    double x, y, w;
  };
  std::vector<Pt> pts;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (cells[i].n > 0) pts.push_back({static_cast<double>(i), cells[i].mean, std::min<double>(cells[i].n, 16)});
  }
  if (pts.empty()) return std::nullopt;
  if (pts.size() == 1) {
    // One length seen: draft time scales with forwards; a verify is assumed
    // flat (the first other lengths tried correct it).
    if (proportional && pts[0].x > 0) return pts[0].y * x / pts[0].x;
    return pts[0].y;
  }
  for (size_t i = 0; i + 1 < pts.size(); ++i) {
    if (x >= pts[i].x && x <= pts[i + 1].x) {
      const double t = (x - pts[i].x) / (pts[i + 1].x - pts[i].x);
      return pts[i].y + t * (pts[i + 1].y - pts[i].y);
    }
  }
  // Outside the observed lengths: the weighted least-squares slope (never
  // negative: longer calls do not get cheaper) from the nearest end.
  double sw = 0, sx = 0, sy = 0;
  for (const Pt& p : pts) {
    sw += p.w;
    sx += p.w * p.x;
    sy += p.w * p.y;
  }
  const double mx = sx / sw, my = sy / sw;
  double sxx = 0, sxy = 0;
  for (const Pt& p : pts) {
    sxx += p.w * (p.x - mx) * (p.x - mx);
    sxy += p.w * (p.x - mx) * (p.y - my);
  }
  const double slope = sxx > 0 ? std::max(0.0, sxy / sxx) : 0.0;
  const Pt& end = x < pts.front().x ? pts.front() : pts.back();
  return std::max(end.y + slope * (x - end.x), 0.05 * end.y);
}

int64_t SpecCosts::VerifyCount(int drafted) const {
  if (drafted < 0 || drafted > kMaxLen) return 0;
  std::lock_guard<std::mutex> l(mu_);
  return verify_[static_cast<size_t>(drafted)].n;
}

std::optional<double> SpecCosts::Draft(double forwards) const {
  std::lock_guard<std::mutex> l(mu_);
  return Estimate(draft_, forwards, /*proportional=*/true);
}

std::optional<double> SpecCosts::Verify(double drafted) const {
  std::lock_guard<std::mutex> l(mu_);
  return Estimate(verify_, drafted, /*proportional=*/false);
}

std::string SpecCosts::ToString() const {
  std::lock_guard<std::mutex> l(mu_);
  std::string out;
  char buf[64];
  for (const auto& [name, cells] : {std::pair<const char*, const std::vector<Cell>*>{"verify", &verify_},
                                    std::pair<const char*, const std::vector<Cell>*>{"draft", &draft_}}) {
    for (size_t i = 0; i < cells->size(); ++i) {
      if ((*cells)[i].n == 0) continue;
      std::snprintf(buf, sizeof buf, "%s%s[%zu]=%.3fms", out.empty() ? "" : " ", name, i, (*cells)[i].mean * 1e3);
      out += buf;
    }
  }
  return out.empty() ? "(no measurements)" : out;
}

// ---------------------------------------------------------------- SpecPolicy

SpecPolicy::SpecPolicy(const SpecPolicyOptions& opts, const SpecCosts* costs) : o_(opts), costs_(costs) {
  o_.draft_max = std::clamp(o_.draft_max, 0, SpecCosts::kMaxLen);
  o_.ewma = std::clamp(o_.ewma, 1e-3, 1.0);
  o_.prior_accept = std::clamp(o_.prior_accept, 0.0, 1.0);
  o_.probe_after = std::max(o_.probe_after, 1);
  o_.probe_max = std::max(o_.probe_max, o_.probe_after);
  alpha_.assign(static_cast<size_t>(o_.draft_max) + 1, o_.prior_accept);
  pi_.assign(static_cast<size_t>(o_.draft_max) + 1, 1.0);
  seen_alpha_.assign(alpha_.size(), 0);
  seen_pi_.assign(pi_.size(), 0);
  probe_wait_ = o_.probe_after;
}

double SpecPolicy::ExpectedTokens(int k) const {
  double e = 1, run = 1;
  for (int i = 1; i <= std::min(k, o_.draft_max); ++i) {
    run *= pi_[static_cast<size_t>(i)] * alpha_[static_cast<size_t>(i)];
    e += run;
  }
  return e;
}

double SpecPolicy::ExpectedDrafted(int k) const {
  double e = 0, run = 1;
  for (int i = 1; i <= std::min(k, o_.draft_max); ++i) {
    run *= pi_[static_cast<size_t>(i)];
    e += run;
  }
  return e;
}

double SpecPolicy::ExpectedForwards(int k) const {
  // Forward i decides position i; it runs when position i - 1 was drafted.
  double e = 0, run = 1;
  for (int i = 1; i <= std::min(k, o_.draft_max); ++i) {
    if (i > 1) run *= pi_[static_cast<size_t>(i - 1)];
    e += run;
  }
  return e;
}

std::optional<double> SpecPolicy::ExpectedRate(int k) const {
  if (!costs_) return std::nullopt;
  double t = 0;
  if (k == 0) {
    auto v = costs_->Verify(0);
    if (!v) return std::nullopt;
    t = *v;
  } else {
    auto d = costs_->Draft(ExpectedForwards(k));
    auto v = costs_->Verify(ExpectedDrafted(k));
    if (!d || !v) return std::nullopt;
    t = *d + *v;
  }
  return ExpectedTokens(k) / std::max(t, 1e-9);
}

int SpecPolicy::Best(int kmax) const {
  int best = -1;
  double best_rate = 0;
  for (int k = 0; k <= kmax; ++k) {
    const std::optional<double> r = ExpectedRate(k);
    if (!r) return -1;
    if (best < 0 || *r > best_rate) {
      best = k;
      best_rate = *r;
    }
  }
  return best;
}

int SpecPolicy::Next(int k, int limit) {
  if (k <= 0 || limit <= 0) return 0;
  if (!o_.adaptive) return std::min(k, limit);
  const int kmax = std::min(o_.draft_max, limit);
  if (kmax <= 0) return 0;
  if (costs_ && costs_->VerifyCount(0) == 0 && steps_++ % 8 == 1) return 0;  // measure a target-only step
  const int best = Best(kmax);
  if (best < 0) return std::min(k, kmax);  // costs not known yet
  if (best > 0) {
    idle_ = 0;
    probe_wait_ = o_.probe_after;
    return best;
  }
  // Target-only pays more now; probe the draft now and then, if it could pay.
  const double t0 = *costs_->Verify(0);
  int probe = 0;
  double probe_rate = -1;
  bool could_pay = false;
  for (int j = 1; j <= kmax; ++j) {
    const double t = *costs_->Draft(j) + *costs_->Verify(j);
    could_pay |= (j + 1) / t > 1 / t0;  // every draft accepted
    const double r = ExpectedRate(j).value_or(0);
    if (r > probe_rate) {
      probe = j;
      probe_rate = r;
    }
  }
  // Even when the costs say drafting cannot pay, probe (rarely) so that
  // stale costs get measured again.
  if (++idle_ < (could_pay ? probe_wait_ : 4 * o_.probe_max)) return 0;
  idle_ = 0;
  // Space probes so that their expected loss stays near 3% of the time.
  const double loss = ExpectedTokens(probe) / probe_rate / t0 - ExpectedTokens(probe);  // in target-only steps
  probe_wait_ = std::clamp(std::max(2 * probe_wait_, static_cast<int>(loss / 0.03)), o_.probe_after, o_.probe_max);
  return probe;
}

void SpecPolicy::Observe(int k, int drafted, int accepted) {
  k = std::min(k, o_.draft_max);
  drafted = std::clamp(drafted, 0, k);
  accepted = std::clamp(accepted, 0, drafted);
  // The first observations of a position replace the prior quickly; then EWMA.
  auto update = [&](std::vector<double>& v, std::vector<int>& seen, int i, bool hit) {
    const size_t u = static_cast<size_t>(i);
    const double w = std::max(o_.ewma, 1.0 / (seen[u] + 2.0));
    v[u] += w * ((hit ? 1.0 : 0.0) - v[u]);
    ++seen[u];
  };
  for (int i = 2; i <= std::min(k, drafted + 1); ++i) update(pi_, seen_pi_, i, drafted >= i);
  for (int i = 1; i <= std::min(drafted, accepted + 1); ++i) update(alpha_, seen_alpha_, i, i <= accepted);
}

}  // namespace specd
