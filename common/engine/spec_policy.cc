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

std::vector<SpecCosts::Pt> SpecCosts::Points(const std::vector<Cell>& cells) {
  std::vector<Pt> pts;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (cells[i].n > 0) pts.push_back({static_cast<double>(i), cells[i].mean, std::min<double>(cells[i].n, 16)});
  }
  return pts;
}

std::optional<double> SpecCosts::Estimate(const std::vector<Pt>& pts, double x, bool proportional) {
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

std::optional<double> SpecCosts::Draft(double forwards) const {
  std::lock_guard<std::mutex> l(mu_);
  return Estimate(Points(draft_), forwards, /*proportional=*/true);
}

std::optional<double> SpecCosts::Verify(double drafted) const {
  std::lock_guard<std::mutex> l(mu_);
  return Estimate(Points(verify_), drafted, /*proportional=*/false);
}

CostTable SpecCosts::Table(int n) const {
  n = std::clamp(n, 0, kMaxLen);
  CostTable t;
  t.draft.assign(static_cast<size_t>(n) + 1, 0.0);
  t.verify.assign(static_cast<size_t>(n) + 1, 0.0);
  std::lock_guard<std::mutex> l(mu_);
  const std::vector<Pt> d = Points(draft_), v = Points(verify_);
  t.known = !d.empty() && !v.empty();
  if (!t.known) return t;
  for (int i = 0; i <= n; ++i) {
    t.draft[static_cast<size_t>(i)] = i == 0 ? 0.0 : *Estimate(d, i, /*proportional=*/true);
    t.verify[static_cast<size_t>(i)] = *Estimate(v, i, /*proportional=*/false);
  }
  return t;
}

double CostTable::At(const std::vector<double>& v, double x) {
  if (v.empty()) return 0;
  if (x <= 0) return v[0];
  const size_t i = static_cast<size_t>(x);
  if (i + 1 >= v.size()) return v.back();
  const double f = x - static_cast<double>(i);
  return v[i] + f * (v[i + 1] - v[i]);
}

int64_t SpecCosts::VerifyCount(int drafted) const {
  if (drafted < 0 || drafted > kMaxLen) return 0;
  std::lock_guard<std::mutex> l(mu_);
  return verify_[static_cast<size_t>(drafted)].n;
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

double SpecPolicy::alpha(int i) const {
  const double parent = i <= 1 ? o_.prior_accept : alpha(i - 1);
  const int n = seen_alpha_[static_cast<size_t>(i)];
  if (n >= 3) return alpha_[static_cast<size_t>(i)];
  const double w = n / 3.0;
  return w * alpha_[static_cast<size_t>(i)] + (1 - w) * parent;
}

double SpecPolicy::ExpectedTokens(int k) const {
  double e = 1, run = 1;
  for (int i = 1; i <= std::min(k, o_.draft_max); ++i) {
    run *= pi_[static_cast<size_t>(i)] * alpha(i);
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

double SpecPolicy::Rate(const CostTable& t, int k) const {
  const double secs = k == 0 ? t.Verify(0) : t.Draft(ExpectedForwards(k)) + t.Verify(ExpectedDrafted(k));
  return ExpectedTokens(k) / std::max(secs, 1e-9);
}

std::optional<double> SpecPolicy::ExpectedRate(int k) const {
  if (!costs_) return std::nullopt;
  const CostTable t = costs_->Table(std::max(k, 1));
  if (!t.known) return std::nullopt;
  return Rate(t, k);
}

int SpecPolicy::Best(const CostTable& t, int kmax) const {
  int best = 0;
  double best_rate = -1;
  for (int k = 0; k <= kmax; ++k) {
    const double r = Rate(t, k);
    if (r > best_rate) {
      best = k;
      best_rate = r;
    }
  }
  return best;
}

bool SpecPolicy::CouldPay(const CostTable& t, int kmax) {
  for (int j = 1; j <= kmax; ++j) {
    if ((j + 1) / std::max(t.Draft(j) + t.Verify(j), 1e-12) > 1 / std::max(t.Verify(0), 1e-12)) return true;
  }
  return false;
}

int SpecPolicy::Next(int k, int limit) {
  if (k <= 0 || limit <= 0) return 0;
  if (!o_.adaptive) return std::min(k, limit);
  const int kmax = std::min(o_.draft_max, limit);
  if (kmax <= 0) return 0;
  if (!costs_) return std::min(k, kmax);
  if (costs_->VerifyCount(0) == 0 && steps_++ % 8 == 1) return 0;  // measure a target-only step
  const CostTable t = costs_->Table(kmax);
  if (!t.known) return std::min(k, kmax);  // costs not known yet
  const bool could_pay = CouldPay(t, kmax);
  // Warm-up: measure this request's acceptance before the estimates decide.
  if (observed_ < o_.warmup_steps && could_pay) return std::min(k, kmax);
  const int best = Best(t, kmax);
  if (best > 0) {
    idle_ = 0;
    probe_wait_ = o_.probe_after;
    return best;
  }
  // Target-only pays more now; probe the draft now and then. Even when the
  // costs say drafting cannot pay, probe (rarely) so that stale costs get
  // measured again.
  if (++idle_ < (could_pay ? probe_wait_ : 4 * o_.probe_max)) return 0;
  idle_ = 0;
  int probe = 1;
  double probe_rate = -1;
  for (int j = 1; j <= kmax; ++j) {
    const double r = Rate(t, j);
    if (r > probe_rate) {
      probe = j;
      probe_rate = r;
    }
  }
  // Space probes so that their expected loss stays near 3% of the time.
  const double t0 = t.Verify(0);
  const double loss = ExpectedTokens(probe) / probe_rate / t0 - ExpectedTokens(probe);  // in target-only steps
  probe_wait_ = std::clamp(std::max(2 * probe_wait_, static_cast<int>(loss / 0.03)), o_.probe_after, o_.probe_max);
  return probe;
}

void SpecPolicy::Observe(int k, int drafted, int accepted) {
  k = std::min(k, o_.draft_max);
  drafted = std::clamp(drafted, 0, k);
  accepted = std::clamp(accepted, 0, drafted);
  ++observed_;
  // The first observations of a position are averaged (alpha: from nothing,
  // the prior enters through alpha(); pi: from the prior 1), then EWMA.
  auto update = [&](std::vector<double>& v, std::vector<int>& seen, int i, bool hit, double extra) {
    const size_t u = static_cast<size_t>(i);
    const double w = std::max(o_.ewma, 1.0 / (seen[u] + extra));
    v[u] += w * ((hit ? 1.0 : 0.0) - v[u]);
    ++seen[u];
  };
  for (int i = 2; i <= std::min(k, drafted + 1); ++i) update(pi_, seen_pi_, i, drafted >= i, 2.0);
  for (int i = 1; i <= std::min(drafted, accepted + 1); ++i) update(alpha_, seen_alpha_, i, i <= accepted, 1.0);
}

}  // namespace specd
