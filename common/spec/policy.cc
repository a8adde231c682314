#include "common/spec/policy.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace specd {

// ---------------------------------------------------------------- SpecCosts

void SpecCosts::Add(std::vector<Cell>& cells, int i, double seconds, bool warm) {
  if (i < 0 || i >= static_cast<int>(cells.size()) || !(seconds >= 0)) return;
  std::lock_guard<std::mutex> l(mu_);
  if (frozen_) return;
  Cell& c = cells[static_cast<size_t>(i)];
  // Cold calls stand in only until the cell's first warm one, which replaces them (and
  // only while no cell of theirs is warm: Counts).
  if (!warm && c.warm) return;
  if (warm && !c.warm) c = Cell{0, 0, true};
  // The first two calls of a length are often cold (the CUDA backend runs a
  // new shape eagerly, then captures it as a graph: tens of ms), and a peer
  // that does not report cold forwards counts them as warm: until a third
  // arrives a cell holds the cheaper of them, and the mean starts from the
  // third. (Averaged in, a capture kept a fresh request's deeper verifies
  // looking dear for most of a short generate.)
  if (c.n < 2) {
    c.mean = c.n == 0 ? seconds : std::min(c.mean, seconds);
    ++c.n;
    return;
  }
  // One call stuck behind a long prefill must not make a length look
  // expensive for good: outliers count as 4x.
  seconds = std::clamp(seconds, c.mean / 4, c.mean * 4);
  // Plain mean of the warm observations (the third replaces the cold
  // estimate: weight 1), then an EWMA (costs drift with load).
  const double w = std::max(ewma_, 1.0 / static_cast<double>(c.n - 1));
  c.mean += w * (seconds - c.mean);
  ++c.n;
}

void SpecCosts::ObserveDraft(int forwards, double seconds, bool warm, int members) {
  Add(draft_[static_cast<size_t>(std::clamp(members, 1, kMaxMembers))], forwards, seconds, warm);
}
void SpecCosts::ObserveVerify(int drafted, double seconds, bool warm) { Add(verify_, drafted, seconds, warm); }
void SpecCosts::ObserveResume(int tokens, double extra_seconds, bool warm) {
  Add(resume_, std::min(tokens, kMaxLen), std::max(extra_seconds, 0.0), warm);
}

void SpecCosts::ObserveOverhead(bool drafted, double seconds) { Add(overhead_, drafted ? 1 : 0, std::max(seconds, 0.0)); }

void SpecCosts::ForgetDraft() {
  std::lock_guard<std::mutex> l(mu_);
  for (std::vector<Cell>& cells : draft_) cells.assign(kMaxLen + 1, Cell{});
  resume_.assign(kMaxLen + 1, Cell{});
  overhead_[1] = Cell{};
}

void SpecCosts::Absorb(const SpecCosts& other) {
  if (&other == this) return;
  std::vector<Cell> verify, resume, overhead;
  std::vector<std::vector<Cell>> draft;
  {
    std::lock_guard<std::mutex> l(other.mu_);
    verify = other.verify_;
    resume = other.resume_;
    overhead = other.overhead_;
    draft = other.draft_;
  }
  auto take = [this](std::vector<Cell>& into, const std::vector<Cell>& from) {
    for (size_t i = 0; i < from.size(); ++i)
      if (Counts(from, i)) Add(into, static_cast<int>(i), from[i].mean);
  };
  take(verify_, verify);
  take(resume_, resume);
  take(overhead_, overhead);
  for (size_t m = 0; m < draft.size(); ++m) take(draft_[m], draft[m]);
}

void SpecCosts::Freeze() {
  std::lock_guard<std::mutex> l(mu_);
  frozen_ = true;
}

bool SpecCosts::Counts(const std::vector<Cell>& cells, size_t i) {
  if (cells[i].n == 0) return false;
  if (cells[i].warm) return true;
  for (const Cell& c : cells) {
    if (c.warm) return false;  // cold, next to warm cells: estimated from them
  }
  return true;
}

std::vector<SpecCosts::Pt> SpecCosts::Points(const std::vector<Cell>& cells) {
  std::vector<Pt> pts;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (Counts(cells, i)) pts.push_back({static_cast<double>(i), cells[i].mean, std::min<double>(cells[i].n, 16)});
  }
  return pts;
}

SpecCosts::Line SpecCosts::FitLine(const std::vector<Pt>& pts) {
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
  return Line{slope, my - slope * mx};
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
  const double slope = FitLine(pts).slope;
  const Pt& end = x < pts.front().x ? pts.front() : pts.back();
  return std::max(end.y + slope * (x - end.x), 0.05 * end.y);
}

std::vector<SpecCosts::Pt> SpecCosts::DraftPoints(int members) const {
  members = std::clamp(members, 1, kMaxMembers);
  for (int d = 0; d < kMaxMembers; ++d) {
    for (int m : {members + d, members - d}) {
      if (m < 1 || m > kMaxMembers) continue;
      std::vector<Pt> pts = Points(draft_[static_cast<size_t>(m)]);
      if (!pts.empty()) return pts;
    }
  }
  return {};
}

std::optional<double> SpecCosts::Draft(double forwards, int members) const {
  std::lock_guard<std::mutex> l(mu_);
  return Estimate(DraftPoints(members), forwards, /*proportional=*/true);
}

std::optional<double> SpecCosts::Verify(double drafted) const {
  std::lock_guard<std::mutex> l(mu_);
  return Estimate(Points(verify_), drafted, /*proportional=*/false);
}

CostTable SpecCosts::Table(int n, int members) const {
  n = std::clamp(n, 0, kMaxLen);
  CostTable t;
  t.draft.assign(static_cast<size_t>(n) + 1, 0.0);
  t.verify.assign(static_cast<size_t>(n) + 1, 0.0);
  std::lock_guard<std::mutex> l(mu_);
  const std::vector<Pt> d = DraftPoints(members), v = Points(verify_);
  t.known = !d.empty() && !v.empty();
  // Resume(n) = fixed + n * per_token, a weighted least-squares line through
  // the observed cells (one cell: flat).
  // A kind of step never measured (a cohort that always drafts measures no
  // target-only overhead: the loop leaves out a target-only step among
  // drafts) takes the other's: a step's overhead is mostly its calls.
  t.overhead_target = overhead_[overhead_[0].n > 0 ? 0 : 1].mean;
  t.overhead_draft = overhead_[overhead_[1].n > 0 ? 1 : 0].mean;
  // A target-only step makes a subset of a drafting step's calls, so its
  // overhead is at most the drafting one's: more was learned under other
  // load and, while the steps draft, is never measured again (six CPU
  // streams priced it at 2.2 ms from their first steps, against 0.6 in
  // target-only steps and 1.0-1.9 drafting, and drafted at 0.7x of
  // target-only: round 21).
  t.overhead_target = std::min(t.overhead_target, t.overhead_draft);
  const std::vector<Pt> r = Points(resume_);
  if (!r.empty()) {
    const Line l = FitLine(r);
    t.resume_per_token = l.slope;
    t.resume_fixed = l.at_zero;
  }
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

SpecCosts::Prefill::Prefill(SpecCosts* costs) : costs_(costs) {
  if (!costs_) return;
  costs_->prefills_.fetch_add(1);
  costs_->prefill_epoch_.fetch_add(1);
}

SpecCosts::Prefill::~Prefill() {
  if (!costs_) return;
  costs_->prefills_.fetch_sub(1);
  costs_->prefill_epoch_.fetch_add(1);
}

// A prefill that overlaps the interval from the mark to the check either runs
// at the mark (-1), runs at the check, or started or ended between them (the
// epoch moved).
int64_t SpecCosts::QuietMark() const { return prefills_.load() > 0 ? -1 : prefill_epoch_.load(); }

bool SpecCosts::QuietSince(int64_t mark, int own) const {
  return mark >= 0 && prefills_.load() == 0 && prefill_epoch_.load() == mark + 2 * own;
}

int64_t SpecCosts::VerifyCount(int drafted) const {
  if (drafted < 0 || drafted > kMaxLen) return 0;
  std::lock_guard<std::mutex> l(mu_);
  return Counts(verify_, static_cast<size_t>(drafted)) ? verify_[static_cast<size_t>(drafted)].n : 0;
}

std::string SpecCosts::ToString() const {
  std::lock_guard<std::mutex> l(mu_);
  std::string out;
  char buf[64];
  // members 0: a kind without member counts.
  auto write = [&](const char* name, const std::vector<Cell>& cells, int members) {
    for (size_t i = 0; i < cells.size(); ++i) {
      if (!Counts(cells, i)) continue;
      const char* sep = out.empty() ? "" : " ";
      if (members > 1) {
        std::snprintf(buf, sizeof buf, "%s%s[%dx%zu]=%.3fms", sep, name, members, i, cells[i].mean * 1e3);
      } else {
        std::snprintf(buf, sizeof buf, "%s%s[%zu]=%.3fms", sep, name, i, cells[i].mean * 1e3);
      }
      out += buf;
    }
  };
  write("verify", verify_, 0);
  for (int m = 1; m <= kMaxMembers; ++m) write("draft", draft_[static_cast<size_t>(m)], m);
  write("resume", resume_, 0);
  write("overhead", overhead_, 0);
  return out.empty() ? "(no measurements)" : out;
}

absl::Status SpecCosts::Load(std::string_view table) {
  // (Debian's Abseil has its own string_view.)
  for (absl::string_view cell : absl::StrSplit(absl::string_view(table.data(), table.size()), ' ', absl::SkipWhitespace())) {
    // name[len]=X.XXXms, or draft[members x forwards]=X.XXXms
    const size_t open = cell.find('['), close = cell.find("]="), ms = cell.rfind("ms");
    int len = -1, members = 1;
    double millis = -1;
    const absl::string_view name = cell.substr(0, open);
    absl::string_view index;
    if (open != absl::string_view::npos && close != absl::string_view::npos && close > open) {
      index = cell.substr(open + 1, close - open - 1);
    }
    if (const size_t x = index.find('x'); name == "draft" && x != absl::string_view::npos) {
      if (!absl::SimpleAtoi(index.substr(0, x), &members)) members = -1;
      index = index.substr(x + 1);
    }
    if (open == absl::string_view::npos || close == absl::string_view::npos || ms == absl::string_view::npos ||
        ms != cell.size() - 2 || close < open ||
        (name != "verify" && name != "draft" && name != "resume" && name != "overhead") ||
        !absl::SimpleAtoi(index, &len) || members < 1 || members > kMaxMembers ||
        !absl::SimpleAtod(cell.substr(close + 2, ms - close - 2), &millis) || len < (name == "draft" ? 1 : 0) ||
        len > (name == "overhead" ? 1 : kMaxLen) || !(millis >= 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad cost cell '", cell,
          "' (expected e.g. verify[0]=1.25ms, draft[2]=0.4ms, draft[6x4]=1.1ms, resume[8]=0.2ms or overhead[1]=0.1ms;"
          " members 1..", kMaxMembers, ")"));
    }
    if (name == "verify") ObserveVerify(len, millis * 1e-3);
    else if (name == "draft") ObserveDraft(len, millis * 1e-3, true, members);
    else if (name == "resume") ObserveResume(len, millis * 1e-3);
    else ObserveOverhead(len == 1, millis * 1e-3);
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- estimates

PositionEstimates::PositionEstimates(int size) {
  const size_t n = static_cast<size_t>(std::max(size, 0)) + 1;
  alpha.assign(n, 0.0);
  n_alpha.assign(n, 0.0);
  pi.assign(n, 1.0);
  n_pi.assign(n, 1.0);
}

void PositionEstimates::Observe(int k, int drafted, int accepted, double ewma) {
  k = std::min(k, size());
  drafted = std::clamp(drafted, 0, k);
  accepted = std::clamp(accepted, 0, drafted);
  auto update = [&](std::vector<double>& v, std::vector<double>& n, int i, bool hit) {
    const size_t u = static_cast<size_t>(i);
    const double w = std::max(ewma, 1.0 / (n[u] + 1));
    v[u] += w * ((hit ? 1.0 : 0.0) - v[u]);
    n[u] += 1;
  };
  // Position i was reached (pi) when the step asked for i and the draft did not stop before i - 1.
  for (int i = 2; i <= std::min(k, drafted + 1); ++i) update(pi, n_pi, i, drafted >= i);
  // Position i was judged (alpha) when it was drafted and every earlier one accepted.
  for (int i = 1; i <= std::min(drafted, accepted + 1); ++i) update(alpha, n_alpha, i, i <= accepted);
}

double PositionEstimates::Alpha(int i, double base) const {
  if (i < 1 || i > size()) return base;
  const double parent = i == 1 ? base : Alpha(i - 1, base);
  const double n = n_alpha[static_cast<size_t>(i)];
  if (i == 1 && n >= 3) return alpha[1];
  // Deeper positions: a blend with the one before at 3 pseudo-observations,
  // never a few observations alone (a pair accepting 90% a position whose
  // position 5 read 0.5 after its first rejections kept k = 3 for good;
  // round 40, H100: the ~80% pair 0.980x the best fixed k, 0.955x before).
  const double w = i == 1 ? n / 3.0 : n / (n + 3.0);
  return w * alpha[static_cast<size_t>(i)] + (1 - w) * parent;
}

void ConfidenceBins::Observe(float confidence, bool was_accepted) {
  if (!(confidence >= 0.0f)) return;
  const size_t b = static_cast<size_t>(std::min(kBins - 1, static_cast<int>(confidence * kBins)));
  // Bounded counts: the newest thousands of tokens decide.
  if (n[b] >= 4096) {
    n[b] /= 2;
    accepted[b] /= 2;
  }
  n[b] += 1;
  accepted[b] += was_accepted ? 1 : 0;
}

double ConfidenceBins::total() const {
  double s = 0;
  for (double x : n) s += x;
  return s;
}

double ConfidenceBins::ShareAbove(float t) const {
  double above = 0;
  for (int b = FirstBin(t); b < kBins; ++b) above += n[static_cast<size_t>(b)];
  const double all = total();
  return all > 0 ? above / all : 0.0;
}

double ConfidenceBins::AcceptedAbove(float t) const {
  double above = 0, acc = 0;
  for (int b = FirstBin(t); b < kBins; ++b) {
    above += n[static_cast<size_t>(b)];
    acc += accepted[static_cast<size_t>(b)];
  }
  return above > 0 ? acc / above : 0.0;
}

void AcceptancePrior::ObserveConfidence(float confidence, bool accepted) {
  std::lock_guard<std::mutex> l(mu_);
  conf_.Observe(confidence, accepted);
}

ConfidenceBins AcceptancePrior::Confidence() const {
  std::lock_guard<std::mutex> l(mu_);
  return conf_;
}

void AcceptancePrior::Observe(int k, int drafted, int accepted) {
  std::lock_guard<std::mutex> l(mu_);
  est_.Observe(k, drafted, accepted, ewma_);
  ++steps_;
  target_only_ = 0;
}

void AcceptancePrior::ObserveTargetOnly() {
  std::lock_guard<std::mutex> l(mu_);
  ++target_only_;
}

int64_t AcceptancePrior::TargetOnlySinceDraft() const {
  std::lock_guard<std::mutex> l(mu_);
  return target_only_;
}

PositionEstimates AcceptancePrior::Snapshot() const {
  std::lock_guard<std::mutex> l(mu_);
  return est_;
}

int64_t AcceptancePrior::steps() const {
  std::lock_guard<std::mutex> l(mu_);
  return steps_;
}

void AcceptancePrior::Reset() {
  std::lock_guard<std::mutex> l(mu_);
  est_ = PositionEstimates(est_.size());
  conf_ = ConfidenceBins{};
  steps_ = 0;
  target_only_ = 0;
}

std::string AcceptancePrior::ToString() const {
  std::lock_guard<std::mutex> l(mu_);
  std::string out = absl::StrCat("steps=", steps_);
  char buf[48];
  for (int i = 1; i <= est_.size() && est_.n_alpha[static_cast<size_t>(i)] > 0; ++i) {
    std::snprintf(buf, sizeof buf, " alpha[%d]=%.3f", i, est_.alpha[static_cast<size_t>(i)]);
    out += buf;
  }
  for (int i = 2; i <= est_.size() && est_.n_pi[static_cast<size_t>(i)] > 1; ++i) {
    std::snprintf(buf, sizeof buf, " pi[%d]=%.3f", i, est_.pi[static_cast<size_t>(i)]);
    out += buf;
  }
  for (int b = 0; b < ConfidenceBins::kBins; ++b) {
    const size_t u = static_cast<size_t>(b);
    if (conf_.n[u] == 0) continue;
    std::snprintf(buf, sizeof buf, " conf[%.1f]=%.2f/%.0f", static_cast<double>(b) / ConfidenceBins::kBins,
                  conf_.accepted[u] / conf_.n[u], conf_.n[u]);
    out += buf;
  }
  return out;
}

absl::Status AcceptancePrior::Load(std::string_view text) {
  PositionEstimates est(est_.size());
  ConfidenceBins conf;
  int64_t steps = -1;
  std::vector<std::pair<std::string, double>> cells;  // alpha/pi cells, applied once steps is known
  for (absl::string_view cell : absl::StrSplit(absl::string_view(text.data(), text.size()), ' ', absl::SkipWhitespace())) {
    auto bad = [&] {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad acceptance prior cell '", cell, "' (expected steps=N, alpha[i]=x, pi[i]=x or conf[0.b]=x/n)"));
    };
    const size_t eq = cell.find('=');
    if (eq == absl::string_view::npos) return bad();
    const absl::string_view name = cell.substr(0, eq), value = cell.substr(eq + 1);
    if (name == "steps") {
      if (!absl::SimpleAtoi(value, &steps) || steps < 0) return bad();
      continue;
    }
    const size_t open = name.find('[');
    if (open == absl::string_view::npos || name.back() != ']') return bad();
    const absl::string_view kind = name.substr(0, open), index = name.substr(open + 1, name.size() - open - 2);
    if (kind == "conf") {
      double edge = 0, acc = 0, n = 0;
      const size_t slash = value.find('/');
      if (slash == absl::string_view::npos || !absl::SimpleAtod(index, &edge) ||
          !absl::SimpleAtod(value.substr(0, slash), &acc) || !absl::SimpleAtod(value.substr(slash + 1), &n) ||
          !(edge >= 0 && edge < 1) || !(acc >= 0 && acc <= 1) || !(n >= 0))
        return bad();
      const size_t b = static_cast<size_t>(std::clamp(static_cast<int>(edge * ConfidenceBins::kBins + 0.5), 0,
                                                      ConfidenceBins::kBins - 1));
      conf.n[b] = n;
      conf.accepted[b] = acc * n;
      continue;
    }
    int i = 0;
    double x = 0;
    if ((kind != "alpha" && kind != "pi") || !absl::SimpleAtoi(index, &i) || i < 1 || i > est.size() ||
        !absl::SimpleAtod(value, &x) || !(x >= 0 && x <= 1))
      return bad();
    cells.push_back({absl::StrCat(kind, ":", i), x});
  }
  if (steps < 0) return absl::InvalidArgumentError("an acceptance prior needs steps=N");
  for (const auto& [key, x] : cells) {
    const bool alpha = key[0] == 'a';
    const size_t i = static_cast<size_t>(std::stoi(key.substr(key.find(':') + 1)));
    if (alpha) {
      est.alpha[i] = x;
      est.n_alpha[i] = static_cast<double>(steps);
    } else {
      est.pi[i] = x;
      est.n_pi[i] = static_cast<double>(steps) + 1;
    }
  }
  std::lock_guard<std::mutex> l(mu_);
  est_ = est;
  conf_ = conf;
  steps_ = steps;
  return absl::OkStatus();
}

// ---------------------------------------------------------------- SpecPolicy

SpecPolicy::SpecPolicy(const SpecPolicyOptions& opts, const SpecCosts* costs, AcceptancePrior* prior)
    : o_(opts), costs_(costs), prior_(prior) {
  o_.draft_max = std::clamp(o_.draft_max, 0, SpecCosts::kMaxLen);
  o_.ewma = std::clamp(o_.ewma, 1e-3, 1.0);
  o_.prior_accept = std::clamp(o_.prior_accept, 0.0, 1.0);
  o_.prior_weight = std::max(o_.prior_weight, 0.0);
  o_.prior_accept_weight = std::max(o_.prior_accept_weight, 0.0);
  o_.resume_horizon = std::max(o_.resume_horizon, 1);
  o_.stop_margin = std::max(o_.stop_margin, 0.0);
  o_.probe_after = std::max(o_.probe_after, 1);
  o_.probe_max = std::max(o_.probe_max, o_.probe_after);
  est_ = PositionEstimates(o_.draft_max);
  if (prior_ && o_.adaptive && prior_->steps() >= o_.prior_steps) {
    // Start from the pair's estimates, counted as at most prior_weight
    // observations each, so this request's own observations soon dominate.
    const PositionEstimates p = prior_->Snapshot();
    for (int i = 1; i <= std::min(o_.draft_max, p.size()); ++i) {
      const size_t u = static_cast<size_t>(i);
      est_.alpha[u] = p.alpha[u];
      est_.n_alpha[u] = std::min(p.n_alpha[u], o_.prior_weight);
      est_.pi[u] = p.pi[u];
      est_.n_pi[u] = std::max(1.0, std::min(p.n_pi[u], o_.prior_weight));
    }
    informed_ = true;
  } else if (o_.adaptive && o_.draft_max >= 1) {
    // Position 1 alone: deeper positions lean on the one before until observed (PositionEstimates::Alpha).
    est_.alpha[1] = o_.prior_accept;
    est_.n_alpha[1] = o_.prior_accept_weight;
  }
  probe_wait_ = o_.probe_after;
}

double SpecPolicy::ExpectedTokens(int k) const {
  double e = 1, run = 1;
  for (int i = 1; i <= std::min(k, o_.draft_max); ++i) {
    run *= pi(i) * alpha(i);
    e += run;
  }
  return e;
}

double SpecPolicy::ExpectedDrafted(int k) const {
  double e = 0, run = 1;
  for (int i = 1; i <= std::min(k, o_.draft_max); ++i) {
    run *= pi(i);
    e += run;
  }
  return e;
}

double SpecPolicy::ExpectedForwards(int k) const {
  // A proposer that runs its k forwards without looking (device-resident)
  // saves none by stopping early.
  if (!stop_saves_forwards_) return std::min(k, o_.draft_max);
  // Forward i decides position i; it runs when position i - 1 was drafted.
  double e = 0, run = 1;
  for (int i = 1; i <= std::min(k, o_.draft_max); ++i) {
    if (i > 1) run *= pi(i - 1);
    e += run;
  }
  return e;
}

double SpecPolicy::StepSeconds(const CostTable& t, int k, double resume) const {
  return k == 0 ? t.TargetOnly() : t.Step(ExpectedForwards(k), ExpectedDrafted(k)) + resume;
}

double SpecPolicy::Rate(const CostTable& t, int k, double resume) const {
  return ExpectedTokens(k) / std::max(StepSeconds(t, k, resume), 1e-9);
}

std::optional<double> SpecPolicy::ExpectedRate(int k) const {
  if (!costs_) return std::nullopt;
  const CostTable t = Costs(std::max(k, 1));
  if (!t.known) return std::nullopt;
  return Rate(t, k, 0.0);
}

float SpecPolicy::BestThreshold(const CostTable& t, int k, const ConfidenceBins& bins) const {
  // Position 1 is always proposed (alpha(1): this request's own); a later
  // position is proposed when its confidence clears the threshold (share q)
  // and then accepted as the pair's tokens above it are, scaled by how this
  // request's first position compares with the pair's. The forward that
  // computed a cut token is spent either way; cutting saves its verify slot
  // and the forwards after it.
  const double a_all = bins.AcceptedAbove(0.0f);
  const double r = a_all > 0 ? alpha(1) / a_all : 1.0;
  float best_t = 0.0f;
  double best_rate = -1;
  for (int b = 0; b < ConfidenceBins::kBins; ++b) {
    const float th = static_cast<float>(b) / ConfidenceBins::kBins;
    const double q = bins.ShareAbove(th), a = std::min(1.0, bins.AcceptedAbove(th) * r);
    double e = 1 + alpha(1), run = alpha(1), fwd = 1, drafted = 1, proposed = 1;
    for (int i = 2; i <= k; ++i) {
      fwd += stop_saves_forwards_ ? proposed : 1.0;  // forward i runs when position i - 1 was proposed
      proposed *= q;
      drafted += proposed;
      run *= q * a;
      e += run;
    }
    const double rate = e / std::max(t.Step(fwd, drafted), 1e-12);
    if (rate > best_rate * (1 + 1e-9)) {
      best_rate = rate;
      best_t = th;
    }
  }
  return best_t;
}

bool SpecPolicy::DeeperCouldWin(const CostTable& t, int best, int kmax, double best_rate, double resume) const {
  // reach: every position up to best drafted and accepted (E(best)'s last term).
  double e = ExpectedTokens(best), reach = e - ExpectedTokens(best - 1);
  for (int j = best + 1; j <= kmax; ++j) {
    reach *= pi(j);  // position j drafted, then accepted
    e += reach;
    if (e / std::max(StepSeconds(t, j, resume), 1e-9) > best_rate) return true;
  }
  return false;
}

std::pair<int, double> SpecPolicy::BestDrafting(const CostTable& t, int kmax, double resume) const {
  int best = 1;
  double best_rate = -1;
  for (int j = 1; j <= kmax; ++j) {
    const double r = Rate(t, j, resume);
    if (r > best_rate) {
      best = j;
      best_rate = r;
    }
  }
  return {best, best_rate};
}

CostTable SpecPolicy::Costs(int kmax) const {
  // A batch of one: kmax; of m members: their forward's tokens, and proposals of m sequences.
  CostTable t = costs_->Table(Members() * (kmax + 1) - 1, Members());
  t.members = Members();
  return t;
}

bool SpecPolicy::CouldPay(const CostTable& t, int kmax) {
  for (int j = 1; j <= kmax; ++j) {
    if ((j + 1) / std::max(t.Step(j, j), 1e-12) > 1 / std::max(t.TargetOnly(), 1e-12)) return true;
  }
  return false;
}

int SpecPolicy::Next(int k, int limit) {
  // (A request the draft never proposed for is behind by every step: its
  // draft first prefills them.)
  if (nexts_++ > 0 && !observed_last_) {
    ++behind_;
    if (prior_ && o_.adaptive) prior_->ObserveTargetOnly();
  }
  observed_last_ = false;
  if (k <= 0 || limit <= 0) return 0;
  if (!o_.adaptive) return std::min(k, limit);
  const int kmax = std::min(o_.draft_max, limit);
  if (kmax <= 0) return 0;
  if (!costs_) return std::min(k, kmax);
  // Measure a target-only step, once per request: in a forward shared with
  // speculating sequences a member's target-only step is priced at the
  // forward's tokens, so the cell of this batch's target-only step may stay
  // unmeasured (then it is extrapolated from the other lengths).
  if (costs_->VerifyCount(Members() - 1) == 0 && !probed_target_only_ && steps_++ % 8 == 1) {
    probed_target_only_ = true;
    return 0;
  }
  const CostTable t = Costs(kmax);
  if (!t.known) return std::min(k, kmax);  // costs not known yet
  const bool shared = batch_members_ > 1 && prior_ && prior_->steps() >= o_.prior_steps;
  use_pooled_ = shared;
  if (shared) pooled_ = prior_->Snapshot();
  const bool could_pay = CouldPay(t, kmax);
  // Warm-up: measure this request's acceptance before the estimates decide.
  if (!informed_ && observed_ < o_.warmup_steps && could_pay) return std::min(k, kmax);
  // Resuming after target-only steps first costs the draft's catch-up:
  // charged to the decision, spread over the steps a resume is expected to
  // draft (no more than the request has left), it keeps the policy from
  // flipping at break-even.
  const double steps_left = std::max(1.0, limit / std::max(ExpectedTokens(kmax), 1.0));
  const double resume = t.Resume(behind_) / std::min<double>(o_.resume_horizon, steps_left);
  auto [best, best_rate] = BestDrafting(t, kmax, resume);
  // While drafting, stop only when target-only is clearly faster: near
  // break-even the estimates' noise would otherwise decide.
  const bool drafting = observed_ > 0 && behind_ == 0;
  if (Rate(t, 0, 0.0) > best_rate * (drafting ? 1 + o_.stop_margin : 1.0)) best = 0;
  if (best > 0) {
    idle_ = 0;
    probe_wait_ = o_.probe_after;
    // The threshold for asking k, at least 2 even when k is 1: a threshold
    // learned only while k >= 2 could never undo the fallback's cuts that
    // made k = 1 look best (the exploration steps ask for 2 with it).
    if (prior_ && kmax >= 2) {
      const ConfidenceBins bins = prior_->Confidence();
      if (bins.total() >= o_.confidence_min_tokens) min_conf_ = BestThreshold(t, std::max(best, 2), bins);
    }
    // Now and then one position deeper: asking for `best` only ever measures
    // positions up to `best`, so a deeper estimate that started low (from the
    // prior or a few early steps) would never be corrected.
    // Only where a deeper k could win if every position past `best` were
    // accepted: otherwise no estimate it corrects can change the choice, and
    // the step pays the longer verify (an H100's 9-token verify costs 1.5x
    // the 8-token one: 1% of the ~80% pair's rate went to asking 8 for 7).
    if (++drafting_ % (std::max(o_.explore_every, 1) * (shared ? batch_members_ : 1)) == 0 && best < kmax &&
        DeeperCouldWin(t, best, kmax, best_rate, resume))
      ++best;
    return best;
  }
  // Target-only pays more now; probe the draft now and then. Even when the
  // costs say drafting cannot pay, probe (rarely) so that stale costs get
  // measured again.
  ++idle_;
  // In a shared batch the members probe together, once none of them has
  // run the draft for as many of the batch's steps as one stream would wait
  // (the prior's count, which every member reads alike): a member probing
  // alone holds the others for its proposal, and each member had probed on
  // its own count, a new request within its first 8 steps, catching its
  // draft up on them (round 21).
  const int members = std::max(batch_members_, 1);
  auto idle_for = [&](int steps) {
    return shared ? prior_->TargetOnlySinceDraft() >= int64_t{steps} * members : idle_ >= steps;
  };
  if (!could_pay) {
    if (!idle_for(4 * o_.probe_max)) return 0;
    idle_ = 0;
    return 1;
  }
  const auto [probe, probe_rate] = BestDrafting(t, kmax, 0.0);
  // A probe's expected loss against a target-only step, in target-only
  // steps, with the draft's catch-up on what it has missed: probe only once
  // the idle steps are 1/3% of it, so probing stays near 3% of the time (the
  // catch-up grows with the wait; where it grows faster than the wait, the
  // probe comes at probe_max).
  const double t0 = t.TargetOnly();
  const double loss =
      ExpectedTokens(probe) / probe_rate / t0 - ExpectedTokens(probe) + t.Resume(behind_ + 1) / t0;
  const int wait = std::clamp(std::max(probe_wait_, static_cast<int>(loss / 0.03)), o_.probe_after, o_.probe_max);
  // (The batch's wait is not capped at probe_max: its probe catches every
  // member's draft up, and the cap made six CPU streams probe every 128
  // steps, each probe prefilling ~150 tokens a member: 12-17% of their time.)
  if (!idle_for(shared ? std::clamp(static_cast<int>(loss / 0.01), o_.probe_after, 4 * o_.probe_max) : wait)) return 0;
  idle_ = 0;
  probe_wait_ = std::clamp(2 * probe_wait_, o_.probe_after, o_.probe_max);  // doubles while probes lose
  return probe;
}

void SpecPolicy::Observe(int k, int drafted, int accepted, float first_confidence) {
  ++observed_;
  observed_last_ = true;
  behind_ = 0;
  est_.Observe(k, drafted, accepted, o_.ewma);
  if (prior_ && o_.adaptive) {
    prior_->Observe(k, drafted, accepted);
    if (drafted >= 1 && first_confidence >= 0) prior_->ObserveConfidence(first_confidence, accepted >= 1);
  }
}

}  // namespace specd
