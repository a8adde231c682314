// Adaptive speculation length: how many tokens to draft at each step.
//
// Per sequence, running estimates (EWMA over steps) of
//   pi_i     the draft goes on to position i (it stops early when its top
//            probability falls under min_confidence; pi_1 = 1), and
//   alpha_i  position i is accepted, given that it was drafted and every
//            earlier position was accepted,
// (a position seen fewer than 3 times leans on the estimate of the position
// before it: acceptance is similar along a proposal, and a depth never tried
// must not look worse than the last one tried) give the expected tokens a
// step that asks for k drafts decides:
//   E(k) = 1 + sum_{i<=k} prod_{j<=i} pi_j alpha_j      (the 1: correction/bonus)
// and the measured cost of the step's two calls (SpecCosts, shared by every
// request that uses the same workers):
//   T(k) = Draft(forwards(k)) + Verify(drafted(k)),     T(0) = a target-only step.
// The policy takes argmax_k E(k) / T(k) over 0..draft_max, after a warm-up
// of `warmup_steps` steps with the fixed k that measures this request's
// acceptance (skipped when the costs say drafting cannot pay). When target-only
// wins, it probes the draft again after probe_after target-only steps
// (doubling while probes keep losing, up to probe_max, and spaced further
// when a probe's expected loss is large), so a sequence whose text turns
// predictable gets speculation back. When the costs say that drafting could
// not pay even if every draft were accepted, it probes only every
// 4 x probe_max steps (to measure stale costs again). While the costs
// hold no measured target-only step, every 8th step is one (its cost cannot
// be extrapolated from verify costs: on some backends one token is much
// cheaper than two).
//
// Fixed mode (adaptive = false) just returns the given k. Both modes are
// capped by the loop's limit (tokens left, context room).
#pragma once
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace specd {

// Estimated call times at lengths 0..n (a snapshot of SpecCosts); fractional
// lengths interpolate linearly between the integers.
struct CostTable {
  std::vector<double> draft, verify;  // draft[0] is unused (0)
  bool known = false;                 // something was observed of both calls
  double Draft(double forwards) const { return At(draft, forwards); }
  double Verify(double drafted) const { return At(verify, drafted); }

 private:
  static double At(const std::vector<double>& v, double x);
};

// Call times, per drafted length: Verify(n) for a verify of n drafts (n + 1
// tokens scored; n = 0 is a target-only step) and Draft(f) for a proposal of
// f draft forwards. Each cell is an EWMA of the times observed with that
// length; lengths never observed are interpolated (or extrapolated along the
// least-squares slope of the observed ones). Thread-safe.
class SpecCosts {
 public:
  static constexpr int kMaxLen = 64;
  explicit SpecCosts(double ewma = 0.1) : ewma_(ewma) {}

  void ObserveDraft(int forwards, double seconds);
  void ObserveVerify(int drafted, double seconds);
  // Seconds, or nullopt while nothing is known. Fractional lengths interpolate.
  std::optional<double> Draft(double forwards) const;
  std::optional<double> Verify(double drafted) const;
  // Observations of a verify of `drafted` drafts (0: target-only steps).
  int64_t VerifyCount(int drafted) const;
  // Both estimates at lengths 0..n under one lock (what the policy reads each step).
  CostTable Table(int n) const;
  // Ignore further observations (benchmarks: costs calibrated once, so that
  // the policy's choices depend only on the text).
  void Freeze();
  // "verify[0]=1.2ms verify[4]=1.9ms draft[4]=0.4ms ..." (observed cells).
  std::string ToString() const;

 private:
  struct Cell {
    double mean = 0;
    int64_t n = 0;
  };
  struct Pt {
    double x, y, w;
  };
  static std::vector<Pt> Points(const std::vector<Cell>& cells);
  static std::optional<double> Estimate(const std::vector<Pt>& pts, double x, bool proportional);
  void Add(std::vector<Cell>& cells, int i, double seconds);

  const double ewma_;
  mutable std::mutex mu_;
  std::vector<Cell> draft_ = std::vector<Cell>(kMaxLen + 1), verify_ = std::vector<Cell>(kMaxLen + 1);
  bool frozen_ = false;
};

struct SpecPolicyOptions {
  bool adaptive = false;
  int draft_max = 8;          // adaptive: the most drafts per step
  double ewma = 0.15;         // weight of one step in the running estimates
  double prior_accept = 0.6;  // alpha_i before a position was ever drafted
  int probe_after = 8;        // target-only steps before the draft is tried again
  int probe_max = 128;        // ... doubling up to this while probes lose
  int warmup_steps = 2;       // steps with the fixed k before the estimates decide
};

class SpecPolicy {
 public:
  // `costs` may be null (then adaptive mode always uses the fixed k).
  SpecPolicy(const SpecPolicyOptions& opts, const SpecCosts* costs);

  // The drafts to ask for next (0: target-only). `k` is the fixed k (adaptive:
  // the k used until costs are known); `limit` caps the answer.
  int Next(int k, int limit);
  // What a step that used the draft did: asked for `k`, got `drafted` (<= k),
  // `accepted` of them kept.
  void Observe(int k, int drafted, int accepted);

  double ExpectedTokens(int k) const;
  // E(k) / T(k) in tokens per second; nullopt while costs are unknown.
  std::optional<double> ExpectedRate(int k) const;
  bool adaptive() const { return o_.adaptive; }
  // The estimates in use for position i (1-based).
  double alpha(int i) const;
  double pi(int i) const { return pi_[static_cast<size_t>(i)]; }

 private:
  // Expected drafts and draft forwards when asking for k.
  double ExpectedDrafted(int k) const;
  double ExpectedForwards(int k) const;
  double Rate(const CostTable& t, int k) const;
  // argmax_k rate over 0..kmax.
  int Best(const CostTable& t, int kmax) const;
  // Whether some k <= kmax beats target-only if every draft is accepted.
  static bool CouldPay(const CostTable& t, int kmax);

  SpecPolicyOptions o_;
  const SpecCosts* costs_;
  std::vector<double> alpha_, pi_;  // index 1..draft_max
  std::vector<int> seen_alpha_, seen_pi_;  // observations of each position
  int idle_ = 0;                    // target-only steps since the last probe
  int probe_wait_ = 0;
  int64_t steps_ = 0;               // Next calls
  int observed_ = 0;                // Observe calls
};

}  // namespace specd
