// Adaptive speculation length: how many tokens to draft at each step.
//
// Per sequence, running estimates (PositionEstimates) of
//   pi_i     the draft goes on to position i (it stops early when its top
//            probability falls under min_confidence; pi_1 = 1), and
//   alpha_i  position i is accepted, given that it was drafted and every
//            earlier position was accepted,
// give the expected tokens a step that asks for k drafts decides:
//   E(k) = 1 + sum_{i<=k} prod_{j<=i} pi_j alpha_j      (the 1: correction/bonus)
// and the measured cost of the step's two calls (SpecCosts, shared by every
// request that uses the same workers):
//   T(k) = Draft(forwards(k)) + Verify(drafted(k)),     T(0) = a target-only step.
// The policy takes argmax_k E(k) / T(k) over 0..draft_max.
//
// A request starts from what earlier requests of the same pair measured
// (AcceptancePrior, shared like the costs), weighted as a few observations,
// so its first rejections do not decide alone; only the first requests of a
// pair (no prior yet) warm up with the fixed k, and their position 1 starts
// from prior_accept as prior_accept_weight observations (a 6-layer pair at
// alpha_1 ~0.55 whose first six steps kept one draft of twelve went
// target-only for its remaining 249 steps: round 37). After target-only steps the
// draft must first catch up on the tokens it missed; that cost (measured,
// SpecCosts::Resume) is charged to resuming, spread over a few steps, so the
// policy does not flip between drafting and target-only at break-even; for
// the same reason, once drafting it stops only when target-only is
// stop_margin faster. Every explore_every drafting steps it asks for one
// position more than the best k (deeper estimates would otherwise never be
// corrected), where a deeper k could win if every position past the best
// were accepted (else the longer verify buys nothing: round 38). The
// draft's confidence threshold is learned per pair
// (ConfidenceBins, MinConfidence): of the thresholds 0, 0.1, ..., 0.9, the
// one whose expected rate is highest given how often the pair's tokens above
// it are accepted (a cut token's forward is spent; the cut saves its verify
// slot and the forwards after it).
// When target-only wins, it probes the draft again after probe_after
// target-only steps (doubling while probes keep losing, up to probe_max, and
// never before the idle steps are 1/3% of the probe's expected loss, the
// catch-up on the missed tokens included), so a sequence whose
// text turns predictable gets speculation back. When the costs say that
// drafting could not pay even if every draft were accepted, it probes only
// every 4 x probe_max steps (to measure stale costs again). While the costs
// hold no measured target-only step, a request's second step is one (its
// cost cannot be extrapolated from verify costs: on some backends one token
// is much cheaper than two), once per request: in a batch shared with
// speculating sequences that step is priced at the batch's tokens.
// A request whose steps share the workers' batches with others (lockstep:
// set_batch) decides with the pair's estimates instead of its own, so that
// the members ask for the same k, and prices a step as its members' forward
// (CostTable::members: m members asking n verify m (n + 1) tokens).
//
// Fixed mode (adaptive = false) just returns the given k. Both modes are
// capped by the loop's limit (tokens left, context room).
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace specd {

// Estimated call times at lengths 0..n (a snapshot of SpecCosts); fractional
// lengths interpolate linearly between the integers.
struct CostTable {
  std::vector<double> draft, verify;  // draft[0] is unused (0)
  bool known = false;                 // something was observed of both calls
  double resume_fixed = 0, resume_per_token = 0;  // Resume(n) = fixed + n * per_token
  double overhead_target = 0, overhead_draft = 0;  // per-step overhead of target-only and drafting steps
  int members = 1;  // the sequences a step's forwards hold (lockstep: each asks for the same length)
  double Draft(double forwards) const { return At(draft, forwards); }
  // A verify forward of drafted + 1 tokens.
  double Verify(double drafted) const { return At(verify, drafted); }
  // The verify of a step whose `members` sequences have `drafted` drafts each.
  double VerifyStep(double drafted) const { return At(verify, members * (drafted + 1) - 1); }
  double Resume(double tokens) const { return tokens > 0 ? std::max(0.0, resume_fixed + tokens * resume_per_token) : 0.0; }
  // A whole step: a target-only one, and one with `forwards` draft forwards and `drafted` drafts verified.
  double TargetOnly() const { return VerifyStep(0) + overhead_target; }
  double Step(double forwards, double drafted) const { return Draft(forwards) + VerifyStep(drafted) + overhead_draft; }

 private:
  static double At(const std::vector<double>& v, double x);
};

// Step costs, per length: Verify(n) for a verify forward of n + 1 tokens
// scored (one sequence's n drafts; n = 0 is a target-only step: the target's
// forward and acceptance; or several sequences' tokens in one forward) and
// Draft(f, m) for a proposal of f draft forwards of m sequences each (the
// draft's forwards and sampling), as the workers measure them (a call the
// worker ran for several sequences at once counts at the batch's tokens, or
// members and forwards, since each member pays all of it: VerifyCostCell,
// DraftCostCell in common/spec/loop.h; a verify is one forward, whose time
// follows its tokens, but a proposal is f forwards, each paying its members:
// one line per member count, the nearest measured one standing in for a
// count never measured); and the overhead of a step beyond those (transport
// and host work: StepTimes::overhead), one
// figure for target-only steps and one for drafting steps, so that overhead
// is neither hidden in nor scaled with the forward costs. Each cell is an
// EWMA of the times observed with that length; lengths never observed are
// interpolated (or extrapolated along the least-squares slope of the
// observed ones). A call whose forward ran cold (the CUDA backend ran its
// batch's shape eagerly the first time, or captured its graph:
// VerifyFigures::cold, ProposeFigures::cold) is not what that length costs
// once the shape repeats: it stands in for its cell only while no cell of
// its kind (verify, draft of that member count, resume) has a warm observation (then a cold-only
// cell is estimated from the warm ones, as one never observed); a cell's
// first warm observation replaces its cold ones, and cold ones after that
// are ignored (six lockstep streams' batches take many shapes, and their
// first runs had inflated the cells by up to 2.5x: round 16; a cold time
// kept as a cell's stand-in until a warm one came kept the policy away from
// that length for good). Loaded cells count as warm. Thread-safe.
class SpecCosts {
 public:
  static constexpr int kMaxLen = 64;
  // Draft cells are kept per member count up to this (more count as this).
  static constexpr int kMaxMembers = 16;
  explicit SpecCosts(double ewma = 0.1) : ewma_(ewma) {}

  // `warm`: the call's forwards replayed what the backend had prepared
  // (false: cold, see above). `members`: the sequences each forward held.
  void ObserveDraft(int forwards, double seconds, bool warm = true, int members = 1);
  void ObserveVerify(int drafted, double seconds, bool warm = true);
  // A proposal that first caught the draft up on `tokens` committed tokens
  // (decided by target-only steps) took `extra_seconds` more than Draft()
  // says (lengths past kMaxLen count as kMaxLen).
  void ObserveResume(int tokens, double extra_seconds, bool warm = true);
  // A step's overhead (StepTimes::overhead) beyond its forwards and acceptance
  // (a kind never observed reads as the other in Table).
  void ObserveOverhead(bool drafted, double seconds);
  // Forget the draft's costs (draft[], resume, drafting overhead): a new draft model was loaded.
  void ForgetDraft();
  // Seconds, or nullopt while nothing is known. Fractional lengths interpolate.
  std::optional<double> Draft(double forwards, int members = 1) const;
  std::optional<double> Verify(double drafted) const;
  // Observations of a verify of `drafted` drafts (0: target-only steps) that count (cold ones: see above).
  int64_t VerifyCount(int drafted) const;
  // Both estimates at lengths 0..n under one lock (what the policy reads
  // each step), the draft's for proposals of `members` sequences.
  CostTable Table(int n, int members = 1) const;
  // Ignore further observations (benchmarks: costs calibrated once, so that
  // the policy's choices depend only on the text).
  void Freeze();
  // Each cell of `other` that holds a cost, observed here once at its mean, as
  // warm (a warm-up measured into a table of its own, then kept).
  void Absorb(const SpecCosts& other);

  // A prefill (a request's target or draft Open) running beside the steps of
  // the requests that share this table, from construction to destruction: a
  // forward timed meanwhile shared the device (or the CPU cores) with it, so
  // it is not what its length costs, and the loop counts it as cold (six CPU
  // streams learned target-only steps at 2-3x their cost while new requests
  // prefilled, then drafted at 0.7x of target-only: round 21).
  class Prefill {
   public:
    explicit Prefill(SpecCosts* costs);
    ~Prefill();
    Prefill(const Prefill&) = delete;
    Prefill& operator=(const Prefill&) = delete;

   private:
    SpecCosts* costs_;
  };
  // A mark taken as a step starts (-1 while a prefill runs), and whether no
  // prefill ran since it was taken (but `own` of the caller's, which ended).
  int64_t QuietMark() const;
  bool QuietSince(int64_t mark, int own = 0) const;
  // "verify[0]=1.2ms verify[4]=1.9ms draft[4]=0.4ms draft[6x4]=1.1ms ... overhead[1]=0.1ms" (cells that
  // count; draft[m x f]: f forwards of m sequences; overhead[0]: target-only steps, overhead[1]: drafting).
  std::string ToString() const;
  // Reads what ToString writes ("resume[n]=..." cells too), as one observation per cell (a table measured
  // elsewhere, e.g. on another machine, to replay its costs).
  absl::Status Load(std::string_view table);

 private:
  struct Cell {
    double mean = 0;
    int64_t n = 0;
    bool warm = false;  // holds warm observations (then only those)
  };
  struct Pt {
    double x, y, w;
  };
  // Whether cell i holds a cost: observed, and warm or with no warm cell beside it.
  static bool Counts(const std::vector<Cell>& cells, size_t i);
  static std::vector<Pt> Points(const std::vector<Cell>& cells);
  // Weighted least squares through non-empty pts; the slope is never
  // negative (longer calls do not get cheaper).
  struct Line {
    double slope, at_zero;
  };
  static Line FitLine(const std::vector<Pt>& pts);
  static std::optional<double> Estimate(const std::vector<Pt>& pts, double x, bool proportional);
  void Add(std::vector<Cell>& cells, int i, double seconds, bool warm = true);
  // The draft line of `members` sequences, or the nearest member count's
  // that holds a cost (the larger on a tie); empty while none does.
  std::vector<Pt> DraftPoints(int members) const;

  const double ewma_;
  mutable std::mutex mu_;
  std::vector<Cell> verify_ = std::vector<Cell>(kMaxLen + 1), resume_ = std::vector<Cell>(kMaxLen + 1),
                    overhead_ = std::vector<Cell>(2);
  // draft_[m]: proposals of m sequences (draft_[0] unused).
  std::vector<std::vector<Cell>> draft_ =
      std::vector<std::vector<Cell>>(kMaxMembers + 1, std::vector<Cell>(kMaxLen + 1));
  bool frozen_ = false;
  std::atomic<int> prefills_{0};           // running now
  std::atomic<int64_t> prefill_epoch_{0};  // prefill starts and ends so far
};

// Per draft position i (1-based): pi_i, the draft went on to position i, and
// alpha_i, position i was accepted given that it was drafted and every
// earlier one was accepted. Each is a running mean that turns into an EWMA of
// weight `ewma` (the first observations are averaged, a prior's
// pseudo-observations included in n).
struct PositionEstimates {
  std::vector<double> alpha, pi, n_alpha, n_pi;  // index 1..size (0 unused)
  // pi starts at 1 as one pseudo-observation; alpha has none.
  explicit PositionEstimates(int size = 0);
  int size() const { return static_cast<int>(alpha.size()) - 1; }
  // A step asked for k, the draft proposed `drafted`, `accepted` were kept.
  void Observe(int k, int drafted, int accepted, double ewma);
  // alpha_i, leaning on position i-1: acceptance is similar along a
  // proposal, and a depth never tried must not look worse than the last one
  // tried. Position 1 leans on `base` until its 3rd observation; a deeper one
  // always blends with position i-1 at 3 pseudo-observations (w = n/(n+3)), so
  // a few early rejections cannot hold a request short for good.
  double Alpha(int i, double base) const;
};

// How often the draft's first proposed token was accepted, by the draft's
// confidence in it (its top probability), in ten bins: what stopping a
// proposal below a confidence threshold gives up. (The first token is always
// proposed, so its bins see every confidence; a deeper position's acceptance
// at a given confidence is taken to be the same.)
struct ConfidenceBins {
  static constexpr int kBins = 10;
  std::array<double, kBins> n{}, accepted{};
  void Observe(float confidence, bool was_accepted);
  double total() const;
  // Of the tokens at confidence >= t (t a bin edge): their share, and how
  // often they were accepted (0 when none).
  double ShareAbove(float t) const;
  double AcceptedAbove(float t) const;

 private:
  static int FirstBin(float t) { return std::max(0, static_cast<int>(t * kBins + 0.5f)); }
};

// What the requests of one draft/target pair measured, across requests: the
// prior a new request's estimates start from, and the acceptance of the
// draft's first token by its confidence. Thread-safe.
class AcceptancePrior {
 public:
  explicit AcceptancePrior(double ewma = 0.01) : ewma_(ewma), est_(SpecCosts::kMaxLen) {}
  void Observe(int k, int drafted, int accepted);
  void ObserveConfidence(float confidence, bool accepted);
  PositionEstimates Snapshot() const;
  ConfidenceBins Confidence() const;
  int64_t steps() const;  // observed speculative steps
  // A target-only step of a request sharing the prior; the count since the
  // last speculative step of any of them (how long the pair's draft has not
  // been run: the shared batch's probes follow it).
  void ObserveTargetOnly();
  int64_t TargetOnlySinceDraft() const;
  void Reset();           // a new draft: its acceptance is not the old one's
  // "steps=562 alpha[1]=0.81 alpha[2]=0.70 ... pi[2]=0.95 ... conf[0.9]=0.97/120 ..."
  // (observed positions; confidence bins as acceptance/observations).
  std::string ToString() const;
  // Replaces the estimates with what ToString wrote (a prior learned earlier,
  // e.g. by `specd stats` or bench-spec, to seed a new process with); each
  // position counts as `steps` observations.
  absl::Status Load(std::string_view prior);

 private:
  const double ewma_;
  mutable std::mutex mu_;
  PositionEstimates est_;
  ConfidenceBins conf_;
  int64_t steps_ = 0;
  int64_t target_only_ = 0;  // since the last Observe
};

// The confidence threshold adaptive mode uses until it has learned one: none.
// Whether confidence predicts acceptance is the pair's to show (random-weight
// drafts are unsure of every token and right 80% of the time); a cut at 0.5
// held such a pair to one draft per step for its first 64 steps (round 7:
// 0.68x the best fixed k in a fresh generate).
constexpr float kAdaptiveMinConfidence = 0.0f;

struct SpecPolicyOptions {
  bool adaptive = false;
  int draft_max = 8;          // adaptive: the most drafts per step
  double ewma = 0.05;         // weight of one step in the running estimates (acceptance is noisy: ~20 steps)
  double prior_accept = 0.6;  // alpha_i before a position was ever drafted (no AcceptancePrior yet)
  // ... counted as this many observations of position 1 (the one that decides drafting against
  // target-only), so that a fresh pair's first few rejections do not decide alone
  double prior_accept_weight = 3;
  int prior_steps = 16;       // an AcceptancePrior counts once it holds this many steps ...
  double prior_weight = 10;   // ... and then weighs as this many observations of each position
  int resume_horizon = 4;     // drafting steps a resume's catch-up cost is spread over
  double stop_margin = 0.05;  // while drafting, target-only must be this much faster to stop
  int explore_every = 16;     // every this many drafting steps, ask for one more than the best k
  double confidence_min_tokens = 16;  // first tokens the confidence bins need before the threshold is learned
  int probe_after = 8;        // target-only steps before the draft is tried again
  int probe_max = 128;        // ... doubling up to this while probes lose
  int warmup_steps = 2;       // steps with the fixed k before the estimates decide (no prior)
};

class SpecPolicy {
 public:
  // `costs` may be null (then adaptive mode always uses the fixed k);
  // `prior` may be null (then the estimates start from prior_accept).
  SpecPolicy(const SpecPolicyOptions& opts, const SpecCosts* costs, AcceptancePrior* prior = nullptr);

  // The drafts to ask for next (0: target-only). `k` is the fixed k (adaptive:
  // the k used until costs are known); `limit` caps the answer.
  int Next(int k, int limit);
  // What a step that used the draft did: asked for `k`, got `drafted` (<= k),
  // `accepted` of them kept; `first_confidence`: the draft's top probability
  // for its first token (< 0: unknown). Also recorded in the prior.
  void Observe(int k, int drafted, int accepted, float first_confidence = -1.0f);
  // The confidence below which the draft should stop proposing in the step
  // Next just chose (adaptive, with a prior, k >= 2): the threshold whose
  // expected rate is highest, from the prior's ConfidenceBins and the costs;
  // `fallback` until those are measured.
  float MinConfidence(float fallback) const { return min_conf_ ? *min_conf_ : fallback; }

  double ExpectedTokens(int k) const;
  // E(k) / T(k) in tokens per second; nullopt while costs are unknown.
  std::optional<double> ExpectedRate(int k) const;
  bool adaptive() const { return o_.adaptive; }
  // The estimates in use for position i (1-based).
  double alpha(int i) const { return Est().Alpha(i, o_.prior_accept); }
  double pi(int i) const { return Est().pi[static_cast<size_t>(i)]; }
  // The sequences in the workers' batches this request's next step runs in
  // (the loop: the lockstep gate's members, else the last verify's batch;
  // 0 or 1: alone). Sharing them (lockstep),
  // the decisions use the pair's estimates (the AcceptancePrior, once it
  // counts) instead of this request's own, so that the members ask for the
  // same k: a batched proposal runs as long as its longest member, so a
  // member asking fewer saves next to nothing and gives up tokens; and each
  // asks one position deeper every explore_every x members drafting steps
  // (the prior learns from every member's exploration).
  void set_batch(int members) { batch_members_ = members; }
  // Whether the estimates started from an AcceptancePrior.
  bool informed() const { return informed_; }
  // Whether a proposal the draft stops early (low confidence) also runs
  // fewer forwards (true: the draft looks at each token before the next
  // forward; false: a device-resident draft runs all k and cuts after).
  void set_stop_saves_forwards(bool on) { stop_saves_forwards_ = on; }

 private:
  // Expected drafts and draft forwards when asking for k.
  double ExpectedDrafted(int k) const;
  double ExpectedForwards(int k) const;
  // A step's expected seconds asking for k (k = 0: target-only, no resume).
  double StepSeconds(const CostTable& t, int k, double resume) const;
  // Tokens per second of asking for k; `resume`: the catch-up cost charged
  // to this step (0 while drafting).
  double Rate(const CostTable& t, int k, double resume) const;
  // argmax over k = 1..kmax of Rate(t, k, resume), and that rate.
  std::pair<int, double> BestDrafting(const CostTable& t, int kmax, double resume) const;
  // Whether some k in (best, kmax] would beat best_rate if every position
  // past `best` were accepted (the exploration's upper bound).
  bool DeeperCouldWin(const CostTable& t, int best, int kmax, double best_rate, double resume) const;
  // Whether some k <= kmax beats target-only if every draft is accepted.
  static bool CouldPay(const CostTable& t, int kmax);
  // The confidence threshold (a bin edge) that maximizes the expected rate
  // of asking for k, from the pair's confidence bins.
  float BestThreshold(const CostTable& t, int k, const ConfidenceBins& bins) const;
  // The costs of asking up to kmax, priced for this request's batch.
  CostTable Costs(int kmax) const;
  int Members() const { return std::max(batch_members_, 1); }

  const PositionEstimates& Est() const { return use_pooled_ ? pooled_ : est_; }

  SpecPolicyOptions o_;
  const SpecCosts* costs_;
  AcceptancePrior* prior_;
  PositionEstimates est_;
  int batch_members_ = 0;
  bool use_pooled_ = false;     // Next decides with pooled_ (the prior's estimates: in a shared batch)
  PositionEstimates pooled_;
  bool informed_ = false;
  int idle_ = 0;        // target-only steps since the last probe
  int behind_ = 0;      // target-only steps since the draft last proposed (tokens it must catch up on)
  int64_t nexts_ = 0;   // Next calls
  bool observed_last_ = false;  // the step before this Next used the draft
  int probe_wait_ = 0;
  int64_t steps_ = 0;   // Next calls while no target-only step is measured
  bool probed_target_only_ = false;  // this request asked for one to measure
  int64_t drafting_ = 0;  // Next calls that asked for drafts
  std::optional<float> min_conf_;  // learned threshold for the current step
  bool stop_saves_forwards_ = true;
  int observed_ = 0;    // Observe calls
};

}  // namespace specd
