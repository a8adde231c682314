#include "common/spec/loop.h"

#include <algorithm>
#include <future>
#include <limits>
#include <optional>
#include <system_error>

#include "absl/strings/str_format.h"

#include "common/util/log.h"

namespace specd {

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kEos: return "eos";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kDeadline: return "deadline";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

// ---------------------------------------------------------------- StopMatcher

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

std::string StopMatcher::Push(std::string_view text) {
  if (matched()) return "";
  held_.append(text);
  size_t best = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t pos = held_.find(s);
    if (pos < best) {
      best = pos;
      match_ = s;
    }
  }
  if (best != std::string::npos) {
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  // Keep the longest tail that is a proper prefix of some stop string: the
  // next text may complete it.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    for (size_t len = std::min(s.size() - 1, held_.size()); len > hold; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopMatcher::Flush() {
  std::string out;
  out.swap(held_);
  return out;
}

std::string StepTimes::PerStep(int64_t steps) const {
  if (steps <= 0) return "per step: (no steps)";
  const double n = static_cast<double>(steps), ms = 1e3 / n;
  const double all = total();
  return absl::StrFormat(
      "per step: draft forwards %.3f ms, verify forward %.3f ms, acceptance %.3f ms, transport %.3f ms, gate %.3f ms, "
      "wait %.3f ms (draft %.3f ms), host %.3f ms; overhead %.3f ms (%.0f%%)",
      draft_forward * ms, verify_forward * ms, accept * ms, transport * ms, gate * ms, wait * ms, wait_draft * ms,
      host * ms, overhead() * ms,
      all > 0 ? 100.0 * overhead() / all : 0.0) +
         (prefill > 0 ? absl::StrFormat("; others' prefill %.3f ms", prefill * ms) : std::string());
}

void StepTimes::Add(const StepTimes& o) {
  draft_forward += o.draft_forward;
  verify_forward += o.verify_forward;
  accept += o.accept;
  transport += o.transport;
  gate += o.gate;
  wait += o.wait;
  wait_draft += o.wait_draft;
  prefill += o.prefill;
  host += o.host;
}

std::string StepTimeReport(const StepTimes& all, int64_t steps, const StepTimes& spec, int64_t spec_steps) {
  std::string out = "step time " + all.PerStep(steps);
  if (spec_steps > 0 && spec_steps < steps) {
    out += absl::StrCat("\n  speculative steps (", spec_steps, "): ", spec.PerStep(spec_steps));
    out += absl::StrCat("\n  target-only steps (", steps - spec_steps,
                        "): ", all.Minus(spec).PerStep(steps - spec_steps));
  }
  return out;
}

StepTimes StepTimes::Minus(const StepTimes& o) const {
  StepTimes r;
  r.draft_forward = draft_forward - o.draft_forward;
  r.verify_forward = verify_forward - o.verify_forward;
  r.accept = accept - o.accept;
  r.transport = transport - o.transport;
  r.gate = gate - o.gate;
  r.wait = wait - o.wait;
  r.wait_draft = wait_draft - o.wait_draft;
  r.prefill = prefill - o.prefill;
  r.host = host - o.host;
  return r;
}

// ---------------------------------------------------------------- the loop

namespace {

using SteadyTime = std::chrono::steady_clock::time_point;

// The draft side of one request: whether the sequence is open there, how much
// of the committed sequence it has, and when to try again after a failure.
struct DraftState {
  bool open = false;
  bool ever_opened = false;
  int64_t synced = 0;      // committed tokens the draft holds
  bool proposed_last = false;  // the previous step used a proposal (so the draft is nearly in sync)
  SteadyTime retry_at{};   // no reopen / proposal before this
  int failures_in_row = 0;
  ExchangeRef last;        // the draft's last proposal since the sequence was (re)opened there (slot -1: none)
};

// The cell of a call shared by `members` sequences whose batch's length per
// member is `batch` (< 0: not reported); `own`: the call's own length.
int CostCell(int own, int members, int batch) {
  if (members <= 1 || batch < 0) return own;
  return std::clamp(batch, 0, SpecCosts::kMaxLen);
}

}  // namespace

int VerifyCostCell(const VerifyFigures& vf, int proposed) {
  return CostCell(proposed, vf.batch_seqs, vf.batch_tokens >= 1 ? vf.batch_tokens - 1 : -1);
}

DraftCell DraftCostCell(const ProposeFigures& pf) {
  if (pf.batch_seqs <= 1 || pf.batch_forwards < 1) return DraftCell{1, pf.forwards, !pf.batch_mixed};
  return DraftCell{std::min(pf.batch_seqs, SpecCosts::kMaxMembers), std::min(pf.batch_forwards, SpecCosts::kMaxLen),
                   !pf.batch_mixed};
}

SpecResult RunSpeculative(const SpecRequest& req, const Tokenizer& tok, Verifier& target, Proposer* draft,
                          const std::function<bool(const StepEvent&)>& on_step) {
  const SteadyTime t0 = std::chrono::steady_clock::now();
  SpecResult r;
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  if (req.prompt.empty() || req.max_tokens < 1) {
    r.reason = FinishReason::kError;
    r.status = absl::InvalidArgumentError(req.prompt.empty() ? "empty prompt" : "max_tokens must be at least 1");
    return r;
  }
  const int32_t seq = req.seq;
  SpecCosts own_costs;
  SpecCosts* costs = req.costs ? req.costs : &own_costs;
  absl::Status st;
  DraftState ds;
  // A draft in another process prefills the prompt beside the target's
  // prefill (a request that may draft): the first step then drafts with
  // the lockstep cohort instead of opening the draft alone after it.
  std::future<absl::Status> draft_opening;
  if (draft != nullptr && draft->OpensBesideTheTarget() &&
      (req.policy.adaptive || (req.live_k ? req.live_k() : req.k) > 0)) {
    try {
      draft_opening = std::async(std::launch::async, [&] {
        const SpecCosts::Prefill prefill(costs);
        return draft->Open(seq, req.prompt, req.sampling, req.deadline);
      });
      ds.ever_opened = true;
    } catch (const std::system_error&) {
      // No thread to spare: the draft opens at the first step that drafts, as a proposer in process does.
    }
  }
  {
    const SpecCosts::Prefill prefill(costs);
    st = target.Open(seq, req.prompt, req.sampling, req.deadline);
  }
  const absl::Status draft_open_status = draft_opening.valid() ? draft_opening.get() : absl::OkStatus();
  r.stats.prefill_seconds = elapsed();
  if (!st.ok()) {
    target.Release(seq);  // a timed-out Open may still have happened there
    if (ds.ever_opened) draft->Release(seq);
    r.reason = FinishReason::kError;
    r.status = st;
    r.stats.elapsed_seconds = elapsed();
    return r;
  }

  std::vector<int32_t> committed = req.prompt;
  SpecPolicy policy(req.policy, costs, req.prior);
  auto since = [](SteadyTime t) { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count(); };
  StreamDecoder decoder(&tok);
  StopMatcher stopper(req.stop);
  auto draft_failed = [&](const absl::Status& why) {
    ++r.stats.draft_failures;
    ds.open = false;
    ds.last = ExchangeRef{};
    const auto now = std::chrono::steady_clock::now();
    switch (why.code()) {
      case absl::StatusCode::kAborted:  // the draft was replaced: reopen at once
        ds.retry_at = now;
        break;
      case absl::StatusCode::kInvalidArgument:
      case absl::StatusCode::kOutOfRange:  // e.g. the draft's context is shorter: it will not get better
        ds.retry_at = SteadyTime::max();
        break;
      default:  // down, slow, full: back off, doubling up to 16x
        ds.retry_at = now + req.draft_retry * (1 << std::min(ds.failures_in_row, 4));
        ++ds.failures_in_row;
    }
    SPECD_LOG(DEBUG) << "draft unavailable, step runs target-only" << Kv("seq", seq) << Kv("why", why.ToString());
  };

  if (ds.ever_opened) {
    if (draft_open_status.ok()) {
      ds.open = true;
      ds.synced = static_cast<int64_t>(committed.size());
    } else {
      draft_failed(draft_open_status);
    }
  }

  // A member from the first step to the last (the prefill above and the
  // releases below are not steps the others should wait for).
  std::optional<StepGate::Member> gate(std::in_place, req.gate);
  while (true) {
    const SteadyTime ts = std::chrono::steady_clock::now();
    // A step that ran beside another request's prefill teaches no costs (SpecCosts::Prefill).
    int64_t quiet_mark = costs->QuietMark();
    // Never propose past max_tokens or the target's context.
    const int remaining = req.max_tokens - static_cast<int>(r.tokens.size());
    const int64_t room = req.max_context > 0 ? req.max_context - static_cast<int64_t>(committed.size()) - 1
                                             : std::numeric_limits<int64_t>::max();
    const int limit = static_cast<int>(std::min<int64_t>(remaining - 1, std::max<int64_t>(room, 0)));
    // k is chosen before the gate, which tells the draft how many proposals
    // its cohort sends.
    // In lockstep the next verify holds the gate's members (one that finished
    // its prefill joins now), not the last verify's batch: priced at the
    // latter, six H100 streams asked 5 drafts in a six-member verify (36
    // tokens, the next matvec tier: 24 ms against 17.5 for 30) in 17% of the
    // steps, 0.96x k = 4; at the gate's members 1.00x (round 40).
    if (req.gate && req.gate->members() > 1) policy.set_batch(req.gate->members());
    const int k = policy.Next(req.live_k ? req.live_k() : req.k, limit);
    const bool drafts = draft != nullptr && k > 0 && std::chrono::steady_clock::now() >= ds.retry_at;
    // The target takes the proposal from the exchange slot of the previous
    // one as soon as the draft publishes it: the verify is sent with the Propose.
    const bool pipelined = drafts && ds.open && req.pipeline_verify && ds.last.slot >= 0 &&
                           draft->PublishesEveryProposal() && target.TakesNextProposal();
    using Step = StepGate::Member::Step;
    const Step plan = !drafts                          ? Step::kVerify
                      : !ds.open                       ? Step::kAlone
                      : pipelined                      ? Step::kProposeWithVerify
                      : draft->BatchesEveryProposal() ? Step::kPropose
                                                       : Step::kProposeAside;
    double gate_wait = gate->Start(plan);
    if (req.cancelled && req.cancelled()) {
      r.reason = FinishReason::kCancelled;
      break;
    }
    if (std::chrono::system_clock::now() >= req.deadline) {
      r.reason = FinishReason::kDeadline;
      break;
    }
    if (room < 0) {
      r.reason = FinishReason::kLength;
      break;
    }

    Proposal prop;
    bool use_draft = false, proposed = false;
    int caught_up = 0, forwards = 0;
    double draft_call = 0, draft_open = 0;
    std::unique_ptr<PendingVerdict> pending;  // the verify sent with the Propose (pipelined)
    SteadyTime tp{};
    if (drafts) {
      if (!ds.open) {
        // The draft's prefill of the committed tokens: not a cost of this
        // step, nor one the other requests wait for (Step::kAlone).
        const SteadyTime to = std::chrono::steady_clock::now();
        {
          const SpecCosts::Prefill prefill(costs);
          st = draft->Open(seq, committed, req.sampling, req.deadline);
        }
        draft_open = since(to);
        ds.ever_opened = true;
        const bool open_quiet = costs->QuietSince(quiet_mark, 1);
        quiet_mark = costs->QuietMark();  // (this step's own prefill ran before its forwards)
        if (st.ok()) {
          // The open prefilled what a resume catches up on: the policy's
          // price of drafting again after target-only steps (a resume cell
          // holds up to kMaxLen tokens; a longer open counts pro rata).
          const int n = static_cast<int>(committed.size()), cell = std::min(n, SpecCosts::kMaxLen);
          costs->ObserveResume(cell, draft_open * cell / std::max(n, 1), open_quiet);
          ds.open = true;
          ds.last = ExchangeRef{};
          ds.synced = static_cast<int64_t>(committed.size());
        } else {
          draft_failed(st);
        }
      }
      if (ds.open) {
        tp = std::chrono::steady_clock::now();
        ProposeRequest pr;
        pr.seq = seq;
        pr.base_len = ds.synced;
        pr.new_tokens.assign(committed.begin() + ds.synced, committed.end());
        const std::vector<int32_t>& fresh = pr.new_tokens;
        pr.k = k;
        pr.min_confidence = req.min_confidence >= 0 ? req.min_confidence
                            : req.policy.adaptive ? policy.MinConfidence(kAdaptiveMinConfidence)
                                                  : 0.0f;
        // The adaptive policy learns the confidence threshold from the first token's confidence.
        pr.want_confidence = req.policy.adaptive;
        pr.cohort = gate->draft_cohort();
        if (pipelined) pending = target.VerifyNext(seq, ds.last, k, gate->target_cohort(), req.deadline);
        auto p = draft->Propose(pr, req.deadline);
        if (p.ok()) {
          proposed = true;
          draft_call = since(tp);
          ds.synced = static_cast<int64_t>(committed.size());
          ds.failures_in_row = 0;
          prop = *std::move(p);
          if (prop.ref.slot >= 0) ds.last = prop.ref;
          if (static_cast<int>(prop.tokens.size()) > k) prop.tokens.resize(k);
          use_draft = !prop.tokens.empty();
          const int n = static_cast<int>(prop.tokens.size());
          // The forwards the proposer ran (none: a proposer without a model,
          // e.g. n-gram lookup, whose cost is step overhead) and their time.
          forwards = prop.figures.forwards;
          if (n < k && forwards >= k) policy.set_stop_saves_forwards(false);
          // (A cold proposal's time stands in for its cell only until a warm one is known: SpecCosts.)
          const double secs = prop.figures.forward_seconds;
          const DraftCell cell = DraftCostCell(prop.figures);
          // (A catch-up is not plain by its catch-up alone: its resume counts without `plain`.)
          const bool warm_call = !prop.figures.cold && costs->QuietSince(quiet_mark);
          const bool warm = warm_call && cell.plain;
          if (forwards == 0) {
            // nothing to learn about the draft's forward costs
          } else if (ds.proposed_last || fresh.empty()) {
            costs->ObserveDraft(cell.forwards, secs, warm, cell.members);
          } else {
            // The draft first caught up on the tokens of target-only steps:
            // a cost of resuming, not of drafting.
            caught_up = static_cast<int>(fresh.size());
            const std::optional<double> normal = costs->Draft(cell.forwards, cell.members);
            if (normal) costs->ObserveResume(caught_up, secs - *normal, warm_call);
          }
          r.stats.draft_seconds += draft_call;
        } else {
          draft_failed(p.status());
        }
      }
    }

    static const std::vector<int32_t> kNone;
    if (!use_draft) draft_call = 0;  // a failed or empty proposal's time is the step's overhead
    // A pipelined member still reaches the gate's Verify barrier (the cohort
    // waits for it there), but its verify is already under way: the wait may
    // overlap it (taken apart below).
    const double verify_gate_wait = gate->Verify();
    SteadyTime tv = std::chrono::steady_clock::now();
    absl::StatusOr<Verdict> step = absl::UnknownError("no verify");
    bool took = false;  // the pipelined verify took the proposal: its verdict is the step
    if (pending) {
      if (!proposed) pending->Abandon();
      step = pending->Wait();
      if (step.ok()) {
        took = true;
        ++r.stats.pipelined_steps;
        // The target's verdict is the step, whatever the loop has of the
        // proposal (its Propose may have failed after it was published).
        if (!proposed) {
          prop = Proposal{};
          forwards = 0;
        } else if (step->proposal != prop.tokens) {
          SPECD_LOG(WARN) << "the pipelined verify took another proposal than the draft returned" << Kv("seq", seq)
                          << Kv("taken", step->proposal.size()) << Kv("returned", prop.tokens.size());
        }
        prop.tokens = step->proposal;
        prop.ref = step->ref;
        use_draft = !prop.tokens.empty();
        if (prop.ref.slot >= 0 && ds.open) ds.last = prop.ref;
      } else if (step.status().code() == absl::StatusCode::kAborted ||
                 step.status().code() == absl::StatusCode::kFailedPrecondition) {
        // Nothing changed on the target: verify the proposal as without pipelining.
        ++r.stats.pipeline_fallbacks;
        SPECD_LOG(DEBUG) << "pipelined verify did not take the proposal" << Kv("seq", seq)
                         << Kv("why", step.status().ToString());
        pending.reset();
      }
    }
    if (!took) gate_wait += verify_gate_wait;
    // A verify the step did not plan here (its pipelined one did not take
    // the proposal) has no others to be sent with; the target still counts
    // it into its cohort.
    CohortTag verify_tag = gate->target_cohort();
    if (pipelined) verify_tag.together = 1;
    if (!pending) {
      tv = std::chrono::steady_clock::now();
      step = target.Verify(seq, use_draft ? prop.tokens : kNone, use_draft ? prop.ref : ExchangeRef{}, verify_tag,
                           req.deadline);
    }
    if (!took && !step.ok() && use_draft && step.status().code() == absl::StatusCode::kFailedPrecondition) {
      // The target could not use the proposal (stale slot, buffer not
      // attached yet); its sequence is unchanged, so run the step without it.
      ++r.stats.draft_failures;
      ds.retry_at = std::chrono::steady_clock::now() + req.draft_retry;
      SPECD_LOG(DEBUG) << "proposal refused by the target" << Kv("seq", seq) << Kv("why", step.status().ToString());
      use_draft = false;
      tv = std::chrono::steady_clock::now();
      verify_tag.together = 1;
      step = target.Verify(seq, kNone, ExchangeRef{}, verify_tag, req.deadline);
    }
    if (step.ok() && (step->appended.empty() || step->n_accepted < 0 ||
                      step->n_accepted > (use_draft ? static_cast<int>(prop.tokens.size()) : 0) ||
                      static_cast<int>(step->appended.size()) != step->n_accepted + 1)) {
      step = absl::InternalError("malformed verify result from the target");
    }
    if (!step.ok()) {
      if (std::chrono::system_clock::now() >= req.deadline ||
          step.status().code() == absl::StatusCode::kDeadlineExceeded) {
        r.reason = FinishReason::kDeadline;
      } else if (req.cancelled && req.cancelled()) {
        r.reason = FinishReason::kCancelled;
      } else {
        r.reason = FinishReason::kError;
        r.status = step.status();
      }
      break;
    }

    ds.proposed_last = use_draft;
    StepEvent ev;
    ev.k = k;
    ev.draft_used = use_draft;
    ev.forwards = use_draft ? forwards : 0;
    ev.caught_up = use_draft ? caught_up : 0;
    ev.proposed = use_draft ? static_cast<int>(prop.tokens.size()) : 0;
    ev.accepted = step->n_accepted;
    ev.appended = static_cast<int>(step->appended.size());
    const double verify_call = since(tv);
    // The step taken apart: what the workers measured of their own work, the
    // calls' time they did not spend (transport), and the rest (host).
    const VerifyFigures& vf = step->figures;
    const bool measured = vf.worker_seconds > 0;
    ev.time.draft_forward = use_draft ? prop.figures.forward_seconds : 0.0;
    ev.time.verify_forward = vf.forward_seconds;
    ev.time.accept = vf.accept_seconds;
    // A call's time: the RPC (transport), then in the worker before its
    // engine thread ran it (wait; the part the worker measured behind other
    // requests' prefill slices: prefill), then the worker's own time.
    auto in_worker = [](double worker_call, double worker) {
      return worker_call > 0 ? std::max(worker_call, worker) : worker;
    };
    auto waited = [&](double w, double behind_prefill, bool in_draft) {
      const double p = std::min(w, std::max(0.0, behind_prefill));
      ev.time.prefill += p;
      ev.time.wait += w - p;
      if (in_draft) ev.time.wait_draft += w - p;
    };
    auto split = [&](double call, double worker_call, double worker, double behind_prefill, bool in_draft) {
      const double inside = in_worker(worker_call, worker);
      ev.time.transport += std::max(0.0, call - inside);
      waited(std::min(std::max(0.0, inside - worker), call), behind_prefill, in_draft);
    };
    ev.time.gate = gate_wait;
    if (took) {
      // One span from the Propose sent to the verdict back: the draft's
      // reply travelled meanwhile, off the step's path. Transport is what
      // the span holds beyond the two workers' times.
      const double d_in = proposed ? in_worker(prop.figures.call_seconds, prop.figures.worker_seconds) : 0.0;
      const double v_in = in_worker(vf.call_seconds, vf.worker_seconds);
      // The gate's Verify barrier, where it did not overlap the workers, is wait.
      const double rest = std::max(0.0, since(tp) - d_in - v_in);
      const double gated = std::min(verify_gate_wait, rest);
      ev.time.transport = rest - gated;
      ev.time.gate += gated;
      waited(std::max(0.0, v_in - vf.worker_seconds), vf.prefill_wait_seconds, false);
      if (proposed)
        waited(std::max(0.0, d_in - prop.figures.worker_seconds), prop.figures.prefill_wait_seconds, true);
    } else {
      split(verify_call, vf.call_seconds, vf.worker_seconds, vf.prefill_wait_seconds, false);
      if (use_draft)
        split(draft_call, prop.figures.call_seconds, prop.figures.worker_seconds, prop.figures.prefill_wait_seconds,
              true);
    }
    const bool quiet = costs->QuietSince(quiet_mark);
    costs->ObserveVerify(VerifyCostCell(vf, ev.proposed),
                         measured ? vf.forward_seconds + vf.accept_seconds : verify_call,
                         !vf.cold && !vf.batch_mixed && quiet);
    policy.set_batch(vf.batch_seqs);  // (in lockstep the gate's members replace it before the next Next)
    r.stats.verify_seconds += verify_call;
    ++r.stats.steps;
    if (r.stats.k_hist.size() <= static_cast<size_t>(ev.proposed)) r.stats.k_hist.resize(static_cast<size_t>(ev.proposed) + 1, 0);
    ++r.stats.k_hist[static_cast<size_t>(ev.proposed)];
    if (use_draft) {
      ++r.stats.speculative_steps;
      r.stats.proposed += ev.proposed;
      r.stats.accepted += ev.accepted;
      r.stats.spec_appended += ev.appended;
      policy.Observe(k, ev.proposed, ev.accepted, prop.confidence.empty() ? -1.0f : prop.confidence[0]);
    }
    committed.insert(committed.end(), step->appended.begin(), step->appended.end());

    FinishReason end = FinishReason::kNone;
    for (size_t i = 0; i < step->appended.size(); ++i) {
      const int32_t t = step->appended[i];
      if (!req.ignore_eos && tok.IsEog(t)) {
        end = FinishReason::kEos;
        break;
      }
      r.tokens.push_back(t);
      ev.tokens.push_back(t);
      if (i < step->logprobs.size()) ev.logprobs.push_back(step->logprobs[i]);
      ev.text += stopper.Push(decoder.Push(t));
      if (stopper.matched()) {
        end = FinishReason::kStop;
        break;
      }
      if (static_cast<int>(r.tokens.size()) >= req.max_tokens) {
        end = FinishReason::kLength;
        break;
      }
    }
    if (end == FinishReason::kEos || end == FinishReason::kLength) {
      ev.text += stopper.Push(decoder.Flush());  // the tail may still complete a stop string
      if (stopper.matched()) end = FinishReason::kStop;
      else ev.text += stopper.Flush();
    }
    r.text += ev.text;
    if (!ev.tokens.empty() && r.stats.first_token_seconds == 0) r.stats.first_token_seconds = elapsed();
    if (end == FinishReason::kStop) r.stop = stopper.match();
    // Host: the rest of the step until its output is ready (before it is streamed).
    ev.time.host = std::max(0.0, since(ts) - draft_open - ev.time.draft_forward - ev.time.verify_forward -
                                     ev.time.accept - ev.time.transport - ev.time.gate - ev.time.wait -
                                     ev.time.prefill);
    // The policy's overhead of a step leaves out the lockstep gate: a wait
    // for the cohort's others, which the members' choice of length does not
    // change (they ask for one). Counted, a target-only step's wait at the
    // Verify barrier for the others' proposals taught it that target-only
    // costs a draft's time (six CPU streams kept drafting at 0.69x of
    // target-only, round 18), and waits at the Start for members joining
    // with their prefill priced a target-only step of six at 7.3 ms against
    // 1.6 (the first requests of six CPU streams drafted throughout: 0.65x,
    // session 20). Nor does a forward that also fed a member's pending
    // prompt, nor a target-only step in a forward with others' drafts (its
    // calls go apart from the cohort's pipelined ones: 1.7 ms against 0.4 ms
    // a step of a cohort verifying without drafts), nor a step that ran
    // beside another request's prefill (queued behind it: 3-7 ms against 0.5),
    // nor a step whose forwards ran cold: a shape's eager first run and its
    // graph capture spend host time outside the forwards' device time, which
    // lands here (the warm-up runs every shape so twice, and its drafting
    // steps had priced the overhead of a request's steps at milliseconds).
    const bool with_drafts = vf.batch_seqs > 1 && vf.batch_tokens > vf.batch_seqs;
    const bool cold = vf.cold || (use_draft && prop.figures.cold);
    if (measured && quiet && !cold && !vf.batch_mixed && (use_draft || !with_drafts))
      costs->ObserveOverhead(use_draft, ev.time.overhead() - ev.time.gate);
    r.stats.time.Add(ev.time);
    if (use_draft) r.stats.spec_time.Add(ev.time);
    if (GetLogLevel() <= LogLevel::kDebug)
      SPECD_LOG(DEBUG) << "step" << Kv("seq", seq) << Kv("asked", k) << Kv("proposed", ev.proposed)
                       << Kv("accepted", ev.accepted) << Kv("alpha1", policy.alpha(1))
                       << Kv("batch_seqs", vf.batch_seqs) << Kv("batch_tokens", vf.batch_tokens)
                       << Kv("gate_members", req.gate ? req.gate->members() : 0);
    if (on_step && !on_step(ev)) {
      r.reason = end != FinishReason::kNone ? end : FinishReason::kCancelled;
      break;
    }
    if (end != FinishReason::kNone) {
      r.reason = end;
      break;
    }
  }

  gate.reset();
  target.Release(seq);
  if (draft != nullptr && ds.ever_opened) draft->Release(seq);
  r.stats.elapsed_seconds = elapsed();
  return r;
}

}  // namespace specd
