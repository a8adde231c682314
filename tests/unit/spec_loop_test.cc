// The speculative loop with in-process clients (LocalDraft / LocalTarget over
// generated models): lossless greedy and sampled output, the exchange-buffer
// hand-off, stop strings, limits, cancellation, draft failures, and figures.
#include <atomic>
#include <future>
#include <cmath>
#include <map>
#include <regex>
#include <random>
#include <thread>

#include "absl/strings/str_format.h"
#include "common/api/request.h"
#include "common/engine/spec_bench.h"
#include "common/engine/spec_local.h"
#include "common/spec/chain.h"
#include "common/spec/loop.h"
#include "common/spec/warmup.h"
#include "common/spec/step_gate.h"
#include "common/spec/ngram.h"
#include "common/spec/policy.h"
#include "common/modelgen/modelgen.h"
#include "gtest/gtest.h"
#include "tests/support/test_models.h"
#include "tests/support/test_util.h"

namespace specd {
namespace {

using testing::FixedRequest;
using testing::MakeTestEngine;
using testing::SharedTestModels;
using testing::TempDir;
using testing::TestModels;

// ---------------------------------------------------------------- StopMatcher

TEST(StopMatcher, HoldsBackPossibleStopsAndCutsBeforeTheMatch) {
  StopMatcher m({"END", "xyz"});
  EXPECT_EQ(m.Push("hello E"), "hello ");  // "E" may start "END"
  EXPECT_EQ(m.Push("N"), "");
  EXPECT_EQ(m.Push("Dafter"), "");
  EXPECT_TRUE(m.matched());
  EXPECT_EQ(m.match(), "END");
  EXPECT_EQ(m.Push("more"), "");
}

TEST(StopMatcher, FalseStartIsReleasedAndEarliestStopWins) {
  StopMatcher m({"abc", "bq"});
  EXPECT_EQ(m.Push("ab"), "");
  EXPECT_EQ(m.Push("x"), "abx");
  EXPECT_FALSE(m.matched());
  EXPECT_EQ(m.Push("zabq"), "za");  // "bq" ends first; "abc" cannot match any more
  EXPECT_EQ(m.match(), "bq");
}

TEST(StopMatcher, FlushReturnsTheHeldTailAndEmptyStopsAreIgnored) {
  StopMatcher m({"", "STOP"});
  EXPECT_EQ(m.Push("a ST"), "a ");
  EXPECT_EQ(m.Flush(), "ST");
  StopMatcher none({});
  EXPECT_EQ(none.Push("anything"), "anything");
}

// ---------------------------------------------------------------- engines

const TestModels* g_models = nullptr;  // other: same vocabulary, unrelated weights

// Proposers without a model (q one-hot at their tokens, no exchange rows),
// the kind an n-gram proposer is.
class TokenProposer : public Proposer {
 public:
  absl::Status Open(int32_t seq, const std::vector<int32_t>& tokens, const SamplingParams&, Deadline) override {
    seqs_[seq] = tokens;
    return absl::OkStatus();
  }
  absl::StatusOr<Proposal> Propose(const ProposeRequest& req, Deadline) override {
    auto it = seqs_.find(req.seq);
    if (it == seqs_.end()) return absl::NotFoundError("not open");
    std::vector<int32_t>& c = it->second;
    c.resize(static_cast<size_t>(req.base_len));
    c.insert(c.end(), req.new_tokens.begin(), req.new_tokens.end());
    Proposal p;  // ref.slot < 0: one-hot
    p.tokens = Draft(c, req.k);
    return p;
  }
  void Release(int32_t seq) override { seqs_.erase(seq); }

 protected:
  virtual std::vector<int32_t> Draft(const std::vector<int32_t>& committed, int k) const = 0;

 private:
  std::map<int32_t, std::vector<int32_t>> seqs_;
};

// Prompt lookup at its simplest: what followed the latest earlier occurrence of the last token.
class LookupProposer final : public TokenProposer {
  std::vector<int32_t> Draft(const std::vector<int32_t>& c, int k) const override {
    std::vector<int32_t> out;
    for (size_t i = c.size() - 1; i-- > 0;) {
      if (c[i] != c.back()) continue;
      for (size_t j = i + 1; j < c.size() && static_cast<int>(out.size()) < k; ++j) out.push_back(c[j]);
      break;
    }
    return out;
  }
};

// Always proposes: the last token k times.
class RepeatProposer final : public TokenProposer {
  std::vector<int32_t> Draft(const std::vector<int32_t>& c, int k) const override {
    return std::vector<int32_t>(static_cast<size_t>(k), c.back());
  }
};

class SpecLoopTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_models = &SharedTestModels();
  }

  void SetUp() override {
    target_engine_ = MakeTestEngine(g_models->target);
    draft_engine_ = MakeTestEngine(g_models->draft);
    other_engine_ = MakeTestEngine(g_models->other);
    ref_engine_ = MakeTestEngine(g_models->target, 1);
    ASSERT_TRUE(target_engine_ && draft_engine_ && other_engine_ && ref_engine_);
    target_ = std::make_unique<LocalTarget>(target_engine_.get());
    auto d = LocalDraft::Create(draft_engine_.get(), 8);
    ASSERT_TRUE(d.ok()) << d.status();
    draft_ = std::move(*d);
    auto o = LocalDraft::Create(other_engine_.get(), 8);
    ASSERT_TRUE(o.ok()) << o.status();
    other_ = std::move(*o);
    ASSERT_TRUE(target_->Attach(draft_->exchange().kind(), draft_->exchange().name()).ok());
  }

  const Tokenizer& tok() const { return target_engine_->tokenizer(); }

  // Attaches the target to `d`'s buffer (the coordinator does this at connect and swap).
  void Use(LocalDraft* d) { ASSERT_TRUE(target_->Attach(d->exchange().kind(), d->exchange().name()).ok()); }

  // Greedy decoding straight on an Engine, one token per forward: the reference.
  std::vector<int32_t> ReferenceGreedy(const std::vector<int32_t>& prompt, int n) {
    Engine& e = *ref_engine_;
    EXPECT_TRUE(e.NewSequence(99).ok());
    std::vector<int32_t> out;
    std::vector<float> logits;
    Engine::Feed f{99, prompt, 1};
    for (int i = 0; i < n; ++i) {
      logits.clear();
      EXPECT_TRUE(e.Run({f}, &logits).ok());
      const int32_t t = Argmax(logits.data(), e.vocab_size());
      out.push_back(t);
      f.tokens = {t};
    }
    e.Release(99);
    return out;
  }

  // The target's processed distribution after `ctx`, from the reference engine.
  TokenDist TargetDist(const std::vector<int32_t>& ctx, const SamplingParams& sp) {
    Engine& e = *ref_engine_;
    EXPECT_TRUE(e.NewSequence(98).ok());
    std::vector<float> logits;
    EXPECT_TRUE(e.Run({Engine::Feed{98, ctx, 1}}, &logits).ok());
    e.Release(98);
    TokenDist d;
    ProcessLogits(logits.data(), e.vocab_size(), sp, ctx, &d);
    return d;
  }

  // A greedy adaptive request (up to 8 drafts, k 4 until costs are known) for `n` tokens, eos ignored.
  static SpecRequest AdaptiveRequest(int32_t seq, const std::vector<int32_t>& prompt, int n, SpecCosts* costs) {
    SpecRequest req;
    req.seq = seq;
    req.prompt = prompt;
    req.max_tokens = n;
    req.ignore_eos = true;
    req.k = 4;
    req.policy.adaptive = true;
    req.policy.draft_max = 8;
    req.costs = costs;
    return req;
  }

  SpecResult Run(const SpecRequest& req, Proposer* draft, std::vector<StepEvent>* events = nullptr) {
    return RunSpeculative(req, tok(), *target_, draft, [&](const StepEvent& ev) {
      if (events) events->push_back(ev);
      return true;
    });
  }

  std::vector<std::vector<int32_t>> Prompts(int n_random) {
    std::vector<std::vector<int32_t>> ps;
    for (const char* text : {"Hello world", "def main():\n    return 0", "The quick brown fox", "a", "1, 2, 3,",
                             "import numpy as np", "Once upon a time", "<html>"}) {
      ps.push_back(tok().Encode(text, true, false));
    }
    std::mt19937 rng(5);
    for (int i = 0; i < n_random; ++i) {
      std::vector<int32_t> p(1 + rng() % 40);
      for (auto& t : p) t = static_cast<int32_t>(rng() % 259 + 3);  // byte tokens and merges
      ps.push_back(p);
    }
    return ps;
  }

  std::unique_ptr<Engine> target_engine_, draft_engine_, other_engine_, ref_engine_;
  std::unique_ptr<LocalTarget> target_;
  std::unique_ptr<LocalDraft> draft_, other_;
};

// ---------------------------------------------------------------- lossless greedy

TEST_F(SpecLoopTest, GreedySpeculativeEqualsGreedyTargetOnly) {
  const int n = 32;
  int compared = 0;
  double accepted = 0, proposed = 0;
  for (const auto& prompt : Prompts(16)) {
    const std::vector<int32_t> ref = ReferenceGreedy(prompt, n);
    for (LocalDraft* d : {draft_.get(), other_.get()}) {
      Use(d);
      for (int k = 0; k <= 8; ++k) {
        SpecRequest req;
        req.seq = 1;
        req.prompt = prompt;
        req.max_tokens = n;
        req.ignore_eos = true;
        req.k = k;
        const SpecResult r = Run(req, d);
        ASSERT_TRUE(r.status.ok()) << r.status;
        ASSERT_EQ(r.reason, FinishReason::kLength);
        ASSERT_EQ(r.tokens, ref) << "k=" << k << " prompt of " << prompt.size() << " tokens";
        EXPECT_EQ(r.stats.draft_failures, 0);
        if (k > 0) {
          EXPECT_GT(r.stats.speculative_steps, 0);
        }
        accepted += static_cast<double>(r.stats.accepted);
        proposed += static_cast<double>(r.stats.proposed);
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 24 * 2 * 9);
  // Real speculation: some but not all proposals are accepted.
  EXPECT_GT(accepted, 0.1 * proposed);
  EXPECT_LT(accepted, proposed);
  EXPECT_EQ(target_engine_->active_sequences(), 0);
  EXPECT_EQ(draft_engine_->active_sequences(), 0);
  EXPECT_EQ(other_engine_->active_sequences(), 0);
}

TEST_F(SpecLoopTest, RepetitionPenaltyIsLosslessThroughTheSampledFeedback) {
  // The draft's tokens are sampled and fed back where the logits are; its
  // penalty window covers the committed tokens and the ones it just drafted.
  SamplingParams sp;
  sp.repetition_penalty = 0.7f;  // < 1 favours repeats: the tokens it drafted weigh in at once
  sp.repetition_window = 64;
  const int n = 24;
  for (const char* text : {"a a a a a", "1, 2, 3,", "def main():\n    return 0"}) {
    const std::vector<int32_t> prompt = tok().Encode(text, true, false);
    // Reference: one token per forward, the penalized greedy choice.
    Engine& e = *ref_engine_;
    ASSERT_TRUE(e.NewSequence(97).ok());
    std::vector<int32_t> ctx = prompt, ref;
    std::vector<float> logits;
    Engine::Feed f{97, prompt, 1, {}};
    for (int i = 0; i < n; ++i) {
      logits.clear();
      ASSERT_TRUE(e.Run({f}, &logits).ok());
      TokenDist d;
      ProcessLogits(logits.data(), e.vocab_size(), sp, ctx, &d);
      ref.push_back(d.ids[0]);
      ctx.push_back(d.ids[0]);
      f.tokens = {d.ids[0]};
    }
    e.Release(97);
    for (int k : {1, 4, 8}) {
      SpecRequest req = FixedRequest(2, prompt, n, k);
      req.sampling = sp;
      const SpecResult r = Run(req, draft_.get());
      ASSERT_TRUE(r.status.ok()) << r.status;
      EXPECT_EQ(r.tokens, ref) << "k=" << k << " prompt '" << text << "'";
      EXPECT_GT(r.stats.accepted, 0);
    }
    // The draft's own proposal: each token penalized by the ones it drafted before it.
    auto dref = MakeTestEngine(g_models->draft, 1);
    ASSERT_TRUE(dref->NewSequence(1).ok());
    std::vector<int32_t> dctx = prompt, dtoks;
    Engine::Feed df{1, prompt, 1, {}};
    for (int i = 0; i < 8; ++i) {
      logits.clear();
      ASSERT_TRUE(dref->Run({df}, &logits).ok());
      TokenDist d;
      ProcessLogits(logits.data(), dref->vocab_size(), sp, dctx, &d);
      dtoks.push_back(d.ids[0]);
      dctx.push_back(d.ids[0]);
      df.tokens = {d.ids[0]};
    }
    ASSERT_TRUE(draft_->OpenSeq(3, prompt, sp).ok());
    auto p = draft_->Propose({3, static_cast<int64_t>(prompt.size()), {}, 8, 0.0f}, kNoDeadline);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->tokens, dtoks);
    draft_->ReleaseSeq(3);
  }
}

// ---------------------------------------------------------------- lossless sampling

// Chi-square critical value for `dof` at p = 1e-4 (Wilson-Hilferty).
double ChiSquareCritical(int dof) {
  const double z = 3.719, d = dof;
  const double t = 1.0 - 2.0 / (9.0 * d) + z * std::sqrt(2.0 / (9.0 * d));
  return d * t * t * t;
}

// Goodness of fit of `counts` (n samples) to `expected` probabilities; cells
// expecting fewer than 5 samples are pooled. Returns statistic / critical.
double ChiSquareRatio(const std::map<std::pair<int, int>, double>& expected,
                      const std::map<std::pair<int, int>, int>& counts, int n, int* dof_out) {
  double stat = 0, pool_e = 0, pool_o = 0;
  int cells = 0;
  for (const auto& [cell, p] : expected) {
    const double e = p * n;
    const auto it = counts.find(cell);
    const double o = it == counts.end() ? 0 : it->second;
    if (e < 5) {
      pool_e += e;
      pool_o += o;
      continue;
    }
    stat += (o - e) * (o - e) / e;
    ++cells;
  }
  for (const auto& [cell, c] : counts) {
    if (!expected.count(cell)) pool_o += c;  // outside the target's support: must not happen
  }
  if (pool_e > 0 || pool_o > 0) {
    stat += (pool_o - pool_e) * (pool_o - pool_e) / std::max(pool_e, 1e-9);
    ++cells;
  }
  *dof_out = cells - 1;
  return stat / ChiSquareCritical(cells - 1);
}

TEST_F(SpecLoopTest, SampledSpeculativeHasTheTargetsDistribution) {
  SamplingParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 4;
  const std::vector<int32_t> prompt = tok().Encode("Once upon a time", true, false);
  constexpr int kEog = -1;
  // Exact joint distribution of the first two output tokens (kEog: generation ended).
  std::map<std::pair<int, int>, double> expected;
  const TokenDist d0 = TargetDist(prompt, sp);
  for (size_t i = 0; i < d0.ids.size(); ++i) {
    const int32_t x0 = d0.ids[i];
    if (tok().IsEog(x0)) {
      expected[{kEog, kEog}] += d0.probs[i];
      continue;
    }
    std::vector<int32_t> ctx = prompt;
    ctx.push_back(x0);
    const TokenDist d1 = TargetDist(ctx, sp);
    for (size_t j = 0; j < d1.ids.size(); ++j) {
      expected[{x0, tok().IsEog(d1.ids[j]) ? kEog : d1.ids[j]}] += d0.probs[i] * d1.probs[j];
    }
  }
  ASSERT_GE(expected.size(), 6u) << "the test needs a spread-out distribution";

  auto sample = [&](Proposer* draft, int k, int n) {
    std::map<std::pair<int, int>, int> counts;
    for (int s = 1; s <= n; ++s) {
      SpecRequest req;
      req.seq = 3;
      req.prompt = prompt;
      req.sampling = sp;
      req.sampling.seed = static_cast<uint64_t>(s) * 7919;
      req.max_tokens = 6;  // more than 2 so that the first step proposes k tokens
      req.k = k;
      const SpecResult r = Run(req, draft);
      EXPECT_TRUE(r.status.ok()) << r.status;
      const int a = r.tokens.size() > 0 ? r.tokens[0] : kEog;
      const int b = r.tokens.size() > 1 ? r.tokens[1] : kEog;
      counts[{a, b}]++;
    }
    return counts;
  };
  const int n = 3000;
  struct Case {
    const char* name;
    Proposer* proposer;
    LocalDraft* draft;  // whose buffer the target reads
    int k;
  };
  RepeatProposer repeat;  // deterministic: q one-hot, rejections draw from p without the token
  ProposerChain chain({&repeat, draft_.get()});
  for (const Case& c : {Case{"target-only", nullptr, nullptr, 0}, Case{"derived draft k=1", draft_.get(), draft_.get(), 1},
                        Case{"derived draft k=4", draft_.get(), draft_.get(), 4},
                        Case{"unrelated draft k=3", other_.get(), other_.get(), 3},
                        Case{"deterministic proposer k=2", &chain, draft_.get(), 2}}) {
    if (c.draft) Use(c.draft);
    int dof = 0;
    const double ratio = ChiSquareRatio(expected, sample(c.proposer, c.k, n), n, &dof);
    EXPECT_LT(ratio, 1.0) << c.name << ": chi-square " << ratio * ChiSquareCritical(dof) << " over the p=1e-4 bound "
                          << ChiSquareCritical(dof) << " (" << dof << " dof)";
  }

  // The test has power: the draft's own samples (a different distribution) fail it.
  std::map<std::pair<int, int>, int> draft_counts;
  Use(other_.get());
  for (int s = 1; s <= n; ++s) {
    ASSERT_TRUE(other_->OpenSeq(4, prompt, SamplingParams{sp.temperature, sp.top_k, 1.0f, 0.0f, 1.0f, 64,
                                                          static_cast<uint64_t>(s)})
                    .ok());
    auto p = other_->Propose({4, static_cast<int64_t>(prompt.size()), {}, 2, 0.0f}, kNoDeadline);
    ASSERT_TRUE(p.ok());
    const int a = tok().IsEog(p->tokens[0]) ? kEog : p->tokens[0];
    const int b = a == kEog ? kEog : (tok().IsEog(p->tokens[1]) ? kEog : p->tokens[1]);
    draft_counts[{a, b}]++;
    other_->ReleaseSeq(4);
  }
  int dof = 0;
  EXPECT_GT(ChiSquareRatio(expected, draft_counts, n, &dof), 1.0) << "the draft's own distribution should be rejected";
}

TEST_F(SpecLoopTest, AChainOfLookupThenDraftIsLossless) {
  // n-gram-style lookup where the text repeats itself, the draft otherwise.
  LookupProposer lookup;
  ProposerChain chain({&lookup, draft_.get()});
  for (const char* text : {"1, 2, 3, 1, 2, 3, 1, 2,", "def f(x):\n    return x\n\ndef g(x):\n    return"}) {
    const std::vector<int32_t> prompt = tok().Encode(text, true, false);
    const std::vector<int32_t> ref = ReferenceGreedy(prompt, 40);
    for (int k : {2, 5}) {
      const SpecResult r = Run(FixedRequest(9, prompt, 40, k), &chain);
      ASSERT_TRUE(r.status.ok()) << r.status;
      EXPECT_EQ(r.tokens, ref) << "k=" << k << " '" << text << "'";
      EXPECT_EQ(r.stats.draft_failures, 0);
    }
  }
  EXPECT_GT(chain.proposals_by_member()[0], 0) << "the lookup proposed";
  EXPECT_GT(chain.proposals_by_member()[1], 0) << "the draft proposed where the lookup had nothing";
  EXPECT_GT(target_->path_counts().one_hot, 0);
  EXPECT_EQ(draft_engine_->active_sequences(), 0);
}

TEST_F(SpecLoopTest, NgramProposalsAreLosslessAloneAndBeforeTheDraft) {
  // The real n-gram proposer (common/spec/ngram.h): alone (no draft at all)
  // and chained before the draft, fixed and adaptive k, on text that repeats
  // itself and on text that does not.
  std::vector<std::vector<int32_t>> prompts = Prompts(6);
  for (const char* text : {"1, 2, 3, 1, 2, 3, 1, 2,", "the cat sat on the mat. the cat sat on the",
                           "def f(x):\n    return x\n\ndef g(x):\n    return"}) {
    prompts.push_back(tok().Encode(text, true, false));
  }
  NgramProposer ngram;
  ProposerChain chain({&ngram, draft_.get()});
  SpecCosts free_costs;  // as the generators keep for n-gram requests
  api::SeedModelFreeCosts(&free_costs);
  int64_t ngram_accepted = 0;
  for (const auto& prompt : prompts) {
    const std::vector<int32_t> ref = ReferenceGreedy(prompt, 40);
    for (int k : {1, 4, 8}) {
      const SpecResult alone = Run(FixedRequest(40, prompt, 40, k), &ngram);
      ASSERT_TRUE(alone.status.ok()) << alone.status;
      EXPECT_EQ(alone.tokens, ref) << "n-gram alone, k=" << k;
      EXPECT_EQ(alone.stats.draft_failures, 0);
      ngram_accepted += alone.stats.accepted;
      const SpecResult both = Run(FixedRequest(41, prompt, 40, k), &chain);
      ASSERT_TRUE(both.status.ok()) << both.status;
      EXPECT_EQ(both.tokens, ref) << "n-gram then draft, k=" << k;
    }
    const SpecResult adaptive = Run(AdaptiveRequest(42, prompt, 40, &free_costs), &ngram);
    ASSERT_TRUE(adaptive.status.ok()) << adaptive.status;
    EXPECT_EQ(adaptive.tokens, ref) << "n-gram alone, adaptive";
  }
  EXPECT_GT(ngram_accepted, 0) << "the lookup's proposals were accepted";
  EXPECT_GT(chain.proposals_by_member()[0], 0);
  EXPECT_GT(chain.proposals_by_member()[1], 0);
  EXPECT_TRUE(free_costs.Table(8).known) << "adaptive n-gram requests price steps without draft forwards";
  EXPECT_EQ(target_engine_->active_sequences(), 0);
  EXPECT_EQ(draft_engine_->active_sequences(), 0);
}

// ---------------------------------------------------------------- exchange hand-off

TEST_F(SpecLoopTest, VerifyReadsExactlyWhatProposeWrote) {
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.seed = 11;
  const std::vector<int32_t> prompt = tok().Encode("The quick brown fox", true, false);
  ASSERT_TRUE(draft_->OpenSeq(5, prompt, sp).ok());
  auto p = draft_->Propose({5, static_cast<int64_t>(prompt.size()), {}, 3, 0.0f}, kNoDeadline);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->tokens.size(), 3u);
  auto reader = ExchangeBuffer::Attach("posix", draft_->exchange().name());
  ASSERT_TRUE(reader.ok());
  std::vector<float> q;
  ASSERT_TRUE((*reader)->Read(p->ref, 5, p->tokens, &q).ok());
  // Row i is the draft's processed distribution after prompt + x_1..x_{i-1},
  // recomputed here on a separate engine.
  auto ref = MakeTestEngine(g_models->draft, 1);
  const int V = ref->vocab_size();
  std::vector<int32_t> ctx = prompt;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(ref->NewSequence(1).ok());
    std::vector<float> logits;
    ASSERT_TRUE(ref->Run({Engine::Feed{1, ctx, 1}}, &logits).ok());
    ref->Release(1);
    TokenDist d;
    ProcessLogits(logits.data(), V, sp, ctx, &d);
    std::vector<float> dense(V, 0.0f);
    for (size_t j = 0; j < d.ids.size(); ++j) dense[d.ids[j]] = d.probs[j];
    for (int t = 0; t < V; ++t) ASSERT_NEAR(q[static_cast<size_t>(i) * V + t], dense[t], 1e-5) << "row " << i;
    EXPECT_GT(q[static_cast<size_t>(i) * V + p->tokens[i]], 0.0f);
    ctx.push_back(p->tokens[i]);
  }
  draft_->ReleaseSeq(5);
}

TEST_F(SpecLoopTest, TargetRefusesAStaleSlotAndKeepsTheSequence) {
  const std::vector<int32_t> prompt = tok().Encode("import numpy as np", true, false);
  ASSERT_TRUE(draft_->OpenSeq(6, prompt, SamplingParams{}).ok());
  ASSERT_TRUE(target_->OpenSeq(6, prompt, SamplingParams{}).ok());
  const int64_t len = static_cast<int64_t>(prompt.size());
  auto first = draft_->Propose({6, len, {}, 4, 0.0f}, kNoDeadline);
  auto second = draft_->Propose({6, len, {}, 4, 0.0f}, kNoDeadline);  // rewrites the slot
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->ref.slot, second->ref.slot);
  EXPECT_NE(first->ref.generation, second->ref.generation);
  auto stale = target_->Verify(6, first->tokens, first->ref, {}, kNoDeadline);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition) << stale.status();
  EXPECT_NE(stale.status().message().find("stale"), std::string::npos) << stale.status();
  EXPECT_EQ(target_->core().CommittedLength(6), len);  // untouched
  // Mismatched tokens are refused too.
  std::vector<int32_t> wrong = second->tokens;
  wrong[0] = (wrong[0] + 1) % target_engine_->vocab_size();
  EXPECT_EQ(target_->Verify(6, wrong, second->ref, {}, kNoDeadline).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto ok = target_->Verify(6, second->tokens, second->ref, {}, kNoDeadline);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(target_->core().CommittedLength(6), len + static_cast<int64_t>(ok->appended.size()));
  // Without an attached buffer a proposal cannot be verified.
  LocalTarget bare(target_engine_.get());
  ASSERT_TRUE(bare.OpenSeq(7, prompt, SamplingParams{}).ok());
  EXPECT_EQ(bare.Verify(7, second->tokens, second->ref, {}, kNoDeadline).status().code(),
            absl::StatusCode::kFailedPrecondition);
  bare.ReleaseSeq(7);
  target_->ReleaseSeq(6);
  draft_->ReleaseSeq(6);
}

TEST_F(SpecLoopTest, AttachRefusesAnotherVocabulary) {
  GenOptions g;
  auto shape = PresetShape("tiny");
  ASSERT_TRUE(shape.ok());
  g.shape = *shape;
  g.shape.vocab_size = 300;
  TempDir dir;
  ASSERT_TRUE(GenerateModel(g, dir.File("v300.gguf")).ok());
  auto e = MakeTestEngine(dir.File("v300.gguf"), 1);
  auto d = LocalDraft::Create(e.get(), 4);
  ASSERT_TRUE(d.ok());
  auto st = target_->Attach((*d)->exchange().kind(), (*d)->exchange().name());
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  // The previous buffer stays attached.
  EXPECT_EQ(target_->exchange()->name(), draft_->exchange().name());
}

// ---------------------------------------------------------------- loop semantics

TEST_F(SpecLoopTest, FiguresAddUp) {
  std::vector<StepEvent> events;
  SpecRequest req;
  req.seq = 8;
  req.prompt = tok().Encode("def main():\n    return 0", true, false);
  req.max_tokens = 50;
  req.ignore_eos = true;
  req.k = 4;
  const SpecResult r = Run(req, draft_.get(), &events);
  ASSERT_TRUE(r.status.ok());
  int64_t proposed = 0, accepted = 0, emitted = 0, spec_steps = 0;
  std::string text;
  for (const StepEvent& ev : events) {
    proposed += ev.proposed;
    accepted += ev.accepted;
    emitted += static_cast<int64_t>(ev.tokens.size());
    spec_steps += ev.draft_used;
    EXPECT_LE(ev.accepted, ev.proposed);
    EXPECT_EQ(ev.appended, ev.accepted + 1);
    text += ev.text;
  }
  EXPECT_EQ(static_cast<int>(events.size()), r.stats.steps);
  EXPECT_EQ(proposed, r.stats.proposed);
  EXPECT_EQ(accepted, r.stats.accepted);
  EXPECT_EQ(spec_steps, r.stats.speculative_steps);
  EXPECT_EQ(emitted, static_cast<int64_t>(r.tokens.size()));
  EXPECT_EQ(static_cast<int>(r.tokens.size()), 50);
  EXPECT_EQ(text, r.text);
  EXPECT_NEAR(r.stats.MeanAcceptedLength(), static_cast<double>(accepted + spec_steps) / spec_steps, 1e-9);
}

TEST_F(SpecLoopTest, StepTimeIsTakenApartByTheRun) {
  std::vector<StepEvent> events;
  SpecRequest req = FixedRequest(8, tok().Encode("def main():\n    return 0", true, false), 40, 4);
  SpecCosts costs;
  req.costs = &costs;
  const SpecResult r = Run(req, draft_.get(), &events);
  ASSERT_TRUE(r.status.ok());
  StepTimes sum;
  for (const StepEvent& ev : events) {
    for (double part : {ev.time.draft_forward, ev.time.verify_forward, ev.time.accept, ev.time.transport, ev.time.gate,
                        ev.time.wait, ev.time.prefill, ev.time.host})
      EXPECT_GE(part, 0.0);
    EXPECT_GT(ev.time.verify_forward, 0.0);  // the workers measured their own work
    if (ev.draft_used) {
      EXPECT_GT(ev.time.draft_forward, 0.0);
    }
    sum.Add(ev.time);
  }
  EXPECT_NEAR(sum.total(), r.stats.time.total(), 1e-12);
  // The parts cover the steps: no more than the request's time, and the
  // forwards are the bulk of it on the CPU in process (no transport).
  EXPECT_LE(r.stats.time.total(), r.stats.elapsed_seconds);
  EXPECT_GT(r.stats.time.draft_forward + r.stats.time.verify_forward, 0.5 * r.stats.time.total());
  EXPECT_LT(r.stats.time.transport, 0.2 * r.stats.time.total());
  // The costs the policy reads are the forwards' and the overhead, apart.
  EXPECT_NE(costs.ToString().find("overhead[1]="), std::string::npos) << costs.ToString();
  EXPECT_NE(r.stats.time.PerStep(r.stats.steps).find("overhead"), std::string::npos);
}

// A verifier passing every call on to `inner`: the wrappers below change some of them.
class ForwardingVerifier : public Verifier {
 public:
  explicit ForwardingVerifier(Verifier* inner) : inner_(inner) {}
  absl::Status Open(int32_t seq, const std::vector<int32_t>& tokens, const SamplingParams& s, Deadline dl) override {
    return inner_->Open(seq, tokens, s, dl);
  }
  absl::StatusOr<Verdict> Verify(int32_t seq, const std::vector<int32_t>& p, const ExchangeRef& ref,
                                 const CohortTag& cohort, Deadline dl) override {
    return inner_->Verify(seq, p, ref, cohort, dl);
  }
  void Release(int32_t seq) override { inner_->Release(seq); }

 private:
  Verifier* inner_;
};

// A verifier and a proposer whose calls are shared with three other
// sequences that draft 6 each (the workers' batches in lockstep): every
// member pays the whole batch.
class SharedForwardTarget final : public ForwardingVerifier {
 public:
  using ForwardingVerifier::ForwardingVerifier;
  absl::StatusOr<Verdict> Verify(int32_t seq, const std::vector<int32_t>& p, const ExchangeRef& ref,
                                 const CohortTag& cohort, Deadline dl) override {
    auto v = ForwardingVerifier::Verify(seq, p, ref, cohort, dl);
    if (v.ok()) {
      EXPECT_EQ(v->figures.batch_seqs, 1);  // LocalTarget reports its forward
      EXPECT_EQ(v->figures.batch_tokens, static_cast<int>(p.size()) + 1);
      v->figures.batch_seqs = 4;
      v->figures.batch_tokens = static_cast<int>(p.size()) + 1 + 3 * 7;
    }
    return v;
  }
};

// A proposer passing every call on to `inner`: the wrappers below change or record some of them.
class ForwardingProposer : public Proposer {
 public:
  explicit ForwardingProposer(Proposer* inner) : inner_(inner) {}
  absl::Status Open(int32_t seq, const std::vector<int32_t>& tokens, const SamplingParams& s, Deadline dl) override {
    return inner_->Open(seq, tokens, s, dl);
  }
  absl::StatusOr<Proposal> Propose(const ProposeRequest& req, Deadline dl) override { return inner_->Propose(req, dl); }
  void Release(int32_t seq) override { inner_->Release(seq); }

 private:
  Proposer* inner_;
};

class SharedForwardDraft final : public ForwardingProposer {
 public:
  using ForwardingProposer::ForwardingProposer;
  absl::StatusOr<Proposal> Propose(const ProposeRequest& req, Deadline dl) override {
    auto p = ForwardingProposer::Propose(req, dl);
    if (p.ok()) {
      EXPECT_EQ(p->figures.batch_seqs, 1);  // LocalDraft reports its forwards
      EXPECT_EQ(p->figures.batch_forwards, p->figures.forwards);
      p->figures.batch_seqs = 4;
      p->figures.batch_forwards = std::max(p->figures.forwards, 6);
    }
    return p;
  }
};

TEST_F(SpecLoopTest, SharedCallsCostAtTheirBatchsTokens) {
  SpecRequest req = FixedRequest(8, tok().Encode("def main():\n    return 0", true, false), 30, 2);
  SpecCosts costs;
  req.costs = &costs;
  SharedForwardTarget target(target_.get());
  SharedForwardDraft draft(draft_.get());
  const SpecResult r = RunSpeculative(req, tok(), target, &draft, [](const StepEvent&) { return true; });
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_GT(r.stats.speculative_steps, 0);
  // Verify: k = 2 with three members at 6: a forward of 3 + 21 tokens, cell 23 (a step that drafted fewer,
  // at the end: 22 or 21). Draft: the batch of four ran 6 forwards.
  const std::string t = costs.ToString();
  EXPECT_NE(t.find("verify[23]="), std::string::npos) << t;
  EXPECT_EQ(t.find("verify[5]="), std::string::npos) << t;
  EXPECT_EQ(t.find("verify[2]="), std::string::npos) << t;
  EXPECT_EQ(t.find("verify[1]="), std::string::npos) << t;
  EXPECT_NE(t.find("draft[4x6]="), std::string::npos) << t;
  EXPECT_EQ(t.find("draft[6]="), std::string::npos) << t;
  EXPECT_EQ(t.find("draft[2]="), std::string::npos) << t;
  EXPECT_EQ(t.find("draft[1]="), std::string::npos) << t;
}

// Workers that say their calls waited before their engine threads ran them
// (call_seconds beyond worker_seconds): the draft 3 ms, the target 1 ms. The
// calls take that long (a sleep), so the waits are within the calls' time.
class HandOffTarget final : public ForwardingVerifier {
 public:
  using ForwardingVerifier::ForwardingVerifier;
  absl::StatusOr<Verdict> Verify(int32_t seq, const std::vector<int32_t>& p, const ExchangeRef& ref,
                                 const CohortTag& cohort, Deadline dl) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    auto v = ForwardingVerifier::Verify(seq, p, ref, cohort, dl);
    if (v.ok()) v->figures.call_seconds = v->figures.worker_seconds + 0.001;
    return v;
  }
};

class HandOffDraft final : public ForwardingProposer {
 public:
  using ForwardingProposer::ForwardingProposer;
  absl::StatusOr<Proposal> Propose(const ProposeRequest& req, Deadline dl) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    auto p = ForwardingProposer::Propose(req, dl);
    if (p.ok()) p->figures.call_seconds = p->figures.worker_seconds + 0.003;
    return p;
  }
};

// The step anatomy's wait tells the draft worker's part from the target's:
// a speculative step waited 3 ms in the draft and 1 ms in the target, a
// target-only step 1 ms, in the target alone.
TEST_F(SpecLoopTest, TheDraftWorkersWaitIsToldApart) {
  SpecRequest req = FixedRequest(8, tok().Encode("def main():\n    return 0", true, false), 30, 3);
  HandOffTarget target(target_.get());
  HandOffDraft draft(draft_.get());
  std::vector<StepEvent> events;
  const SpecResult r = RunSpeculative(req, tok(), target, &draft, [&](const StepEvent& ev) {
    events.push_back(ev);
    return true;
  });
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_GT(r.stats.speculative_steps, 0);
  StepTimes sum;
  for (const StepEvent& ev : events) {
    EXPECT_NEAR(ev.time.wait, ev.draft_used ? 0.004 : 0.001, 1e-9);
    EXPECT_NEAR(ev.time.wait_draft, ev.draft_used ? 0.003 : 0.0, 1e-9);
    sum.Add(ev.time);
  }
  EXPECT_NEAR(r.stats.time.wait_draft, sum.wait_draft, 1e-12);
  EXPECT_NEAR(r.stats.time.wait_draft, 0.003 * static_cast<double>(r.stats.speculative_steps), 1e-9);
  const double per_step_ms = 1e3 / static_cast<double>(r.stats.steps);
  EXPECT_NE(r.stats.time.PerStep(r.stats.steps)
                .find(absl::StrFormat("wait %.3f ms (draft %.3f ms)", r.stats.time.wait * per_step_ms,
                                      r.stats.time.wait_draft * per_step_ms)),
            std::string::npos)
      << r.stats.time.PerStep(r.stats.steps);
  // Apart from the rest, e.g. a request's speculative steps from all of them.
  EXPECT_NEAR(r.stats.time.Minus(r.stats.time).wait_draft, 0.0, 1e-12);
}

// Two requests in lockstep on one target (calls serialized: the engine is
// not thread-safe) and one gate.
class LockedTarget final : public ForwardingVerifier {
 public:
  using ForwardingVerifier::ForwardingVerifier;
  absl::Status Open(int32_t seq, const std::vector<int32_t>& t, const SamplingParams& s, Deadline dl) override {
    std::lock_guard<std::mutex> l(mu_);
    return ForwardingVerifier::Open(seq, t, s, dl);
  }
  absl::StatusOr<Verdict> Verify(int32_t seq, const std::vector<int32_t>& p, const ExchangeRef& ref,
                                 const CohortTag& cohort, Deadline dl) override {
    std::lock_guard<std::mutex> l(mu_);
    return ForwardingVerifier::Verify(seq, p, ref, cohort, dl);
  }
  void Release(int32_t seq) override {
    std::lock_guard<std::mutex> l(mu_);
    ForwardingVerifier::Release(seq);
  }

 private:
  std::mutex mu_;
};

class SlowDraft final : public ForwardingProposer {
 public:
  using ForwardingProposer::ForwardingProposer;
  absl::StatusOr<Proposal> Propose(const ProposeRequest& req, Deadline dl) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    return ForwardingProposer::Propose(req, dl);
  }
};

// In lockstep the policy prices a step at the gate's members, the batch its
// next verify holds, not at the last verify's batch (a member that just
// joined, or one whose last verify ran apart): on the H100's six streams the
// members asked 5 drafts in a six-member verify in 17% of the steps (36
// tokens: the 33..40-token tier, 24 ms against 17.5 for 30 tokens), 0.96x
// k = 4; priced at the gate's members, 1.00x (round 40, call S4). Here the
// draft is the target (every draft accepted), five members sit in the gate
// without stepping, and the table (frozen) says: a verify of up to 9 tokens
// 10 ms, then 2 ms a token; a draft forward 1 ms. Alone, 8 drafts a step pay
// most; in a forward of six, 1.
TEST_F(SpecLoopTest, InLockstepAStepIsPricedAtTheGatesMembers) {
  auto twin_engine = MakeTestEngine(g_models->target);
  ASSERT_TRUE(twin_engine);
  auto twin = LocalDraft::Create(twin_engine.get(), 8);
  ASSERT_TRUE(twin.ok()) << twin.status();
  Use(twin->get());
  std::string table;
  for (int t = 0; t <= 53; ++t) absl::StrAppend(&table, "verify[", t, "]=", t <= 8 ? 10 : 10 + 2 * (t - 8), "ms ");
  for (int f = 1; f <= 8; ++f) absl::StrAppend(&table, "draft[", f, "]=", f, "ms draft[6x", f, "]=", f, "ms ");
  absl::StrAppend(&table, "overhead[0]=0ms overhead[1]=0ms");
  const std::vector<int32_t> prompt = tok().Encode("def main():\n    return 0", true, false);
  const std::vector<int32_t> want = ReferenceGreedy(prompt, 48);
  auto mean_k = [&](int idle_members) {
    SpecCosts costs;
    EXPECT_TRUE(costs.Load(table).ok());
    costs.Freeze();
    StepGateOptions go;
    go.min_wait = std::chrono::microseconds(200);
    go.max_wait = std::chrono::milliseconds(2);  // the idle members are late once, then not waited for
    StepGate gate(go);
    std::vector<std::unique_ptr<StepGate::Member>> idle;
    for (int i = 0; i < idle_members; ++i) idle.push_back(std::make_unique<StepGate::Member>(&gate));
    SpecRequest req = AdaptiveRequest(41, prompt, 48, &costs);
    req.gate = &gate;
    std::vector<StepEvent> events;
    const SpecResult r = Run(req, twin->get(), &events);
    EXPECT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.tokens, want) << idle_members << " idle members";
    double k = 0;
    int n = 0;
    for (size_t i = 3; i < events.size(); ++i, ++n) k += events[i].k;  // after the warm-up steps
    return n > 0 ? k / n : -1.0;
  };
  const double alone = mean_k(0), in_six = mean_k(5);
  EXPECT_GE(alone, 6.0);
  EXPECT_LE(in_six, 2.0);
}

// A target-only step in a cohort that drafts waits at the gate's Verify
// barrier for the others' proposals: its step is that long, but a target-only
// step's overhead for the policy is what it costs when the cohort verifies
// without drafting (the members ask for one length), not a draft's time.
TEST_F(SpecLoopTest, ATargetOnlyStepsWaitForDraftersIsNotItsOverhead) {
  StepGateOptions go;
  go.min_wait = std::chrono::milliseconds(500);  // the gate always waits for the slow member
  StepGate gate(go);
  LockedTarget target(target_.get());
  SlowDraft draft(draft_.get());
  SpecCosts target_only_costs, drafting_costs;
  SpecRequest a = FixedRequest(31, tok().Encode("Hello world", true, false), 12, 0);
  a.costs = &target_only_costs;
  a.gate = &gate;
  SpecRequest b = FixedRequest(32, tok().Encode("def main():\n    return 0", true, false), 40, 4);
  b.costs = &drafting_costs;
  b.gate = &gate;
  std::vector<StepEvent> a_events;
  std::atomic<int> b_steps{0};
  auto fb = std::async(std::launch::async, [&] {
    return RunSpeculative(b, tok(), target, &draft, [&](const StepEvent&) {
      ++b_steps;
      return true;
    });
  });
  // A starts once B drafts in its steps (its first, the draft's prefill, is stepped alone).
  for (int i = 0; i < 5000 && b_steps.load() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const SpecResult ra = RunSpeculative(a, tok(), target, &draft, [&](const StepEvent& ev) {
    a_events.push_back(ev);
    return true;
  });
  const SpecResult rb = fb.get();
  ASSERT_TRUE(ra.status.ok()) << ra.status;
  ASSERT_TRUE(rb.status.ok()) << rb.status;
  EXPECT_EQ(ra.stats.speculative_steps, 0);
  // A's steps waited for B's 30 ms proposals ...
  int waited = 0;
  for (const StepEvent& ev : a_events) waited += ev.time.gate > 0.020;
  std::string waits;
  for (const StepEvent& ev : a_events) waits += absl::StrCat(ev.time.gate * 1e3, " ");
  EXPECT_GE(waited, 3) << "the gate should have held A's verifies for B's proposals: waits (ms) " << waits
                       << "; B: " << rb.stats.steps << " steps, " << rb.stats.speculative_steps << " speculative; "
                       << gate.Figures().ToString();
  // ... which its overhead cell does not count.
  const CostTable t = target_only_costs.Table(1);
  EXPECT_LT(t.overhead_target, 0.005) << target_only_costs.ToString();
}

// Forward costs as a CUDA backend reports them, in place of what the CPU
// measured (deterministic, and well above the step's real time, so that the
// step's overhead is 0): a verify of n drafts 200 + 10 n ms, a proposal 20 ms
// a forward; with `cold`, every third call of a length (never its first) runs
// a new shape of that length, eagerly or captured: 5x, and said to be cold
// only with `report`. With `host_ms` instead (the CPU's own forward times,
// unpriced): the first two calls of every three of a length are cold (an
// eager run, then the capture) and spend host_ms outside the forwards, as a
// capture does.
struct ColdShapes {
  bool cold = false, report = false;
  int host_ms = 0;
  std::map<std::pair<bool, int>, int> calls;  // per (draft?, length): calls so far
  // A call's factor on its warm time, and whether it says it is cold.
  std::pair<double, bool> Next(bool draft, int length) {
    const int n = calls[{draft, length}]++;
    if (host_ms > 0) {
      const bool is_cold = n % 3 < 2;
      if (is_cold) std::this_thread::sleep_for(std::chrono::milliseconds(host_ms));
      return {1.0, is_cold};
    }
    const bool is_cold = cold && n % 3 == 2;
    return {is_cold ? 5.0 : 1.0, is_cold && report};
  }
};

class PricedTarget final : public ForwardingVerifier {
 public:
  PricedTarget(Verifier* inner, ColdShapes* shapes) : ForwardingVerifier(inner), shapes_(shapes) {}
  absl::StatusOr<Verdict> Verify(int32_t seq, const std::vector<int32_t>& p, const ExchangeRef& ref,
                                 const CohortTag& cohort, Deadline dl) override {
    auto v = ForwardingVerifier::Verify(seq, p, ref, cohort, dl);
    if (v.ok()) {
      EXPECT_FALSE(v->figures.cold);  // the CPU backend's forwards are warm
      const int n = static_cast<int>(p.size());
      const auto [x, cold] = shapes_->Next(false, n);
      if (shapes_->host_ms == 0) {
        v->figures.forward_seconds = (0.200 + 0.010 * n) * x;
        v->figures.accept_seconds = 0;
        v->figures.worker_seconds = v->figures.forward_seconds;
      }
      v->figures.cold = cold;
    }
    return v;
  }

 private:
  ColdShapes* shapes_;
};

class PricedDraft final : public ForwardingProposer {
 public:
  PricedDraft(Proposer* inner, ColdShapes* shapes) : ForwardingProposer(inner), shapes_(shapes) {}
  absl::StatusOr<Proposal> Propose(const ProposeRequest& req, Deadline dl) override {
    auto p = ForwardingProposer::Propose(req, dl);
    if (p.ok()) {
      EXPECT_FALSE(p->figures.cold);
      const auto [x, cold] = shapes_->Next(true, p->figures.forwards);
      if (shapes_->host_ms == 0) {
        p->figures.forward_seconds = 0.020 * p->figures.forwards * x;
        p->figures.worker_seconds = p->figures.forward_seconds;
      }
      p->figures.cold = cold;
    }
    return p;
  }

 private:
  ColdShapes* shapes_;
};

// Cold forwards said to be cold do not reach the cost cells: they hold the
// warm costs, and adaptive asks for the same k at every step as it does when
// no forward is cold. Unreported, they inflate the cells.
TEST_F(SpecLoopTest, ColdForwardsDoNotFeedTheCostCells) {
  const std::vector<int32_t> prompt = tok().Encode("def main():\n    return 0", true, false);
  const std::vector<int32_t> ref = ReferenceGreedy(prompt, 60);
  struct Outcome {
    std::vector<int> ks;
    std::string costs;
    double verify4 = 0;
  };
  auto run = [&](bool cold, bool report) {
    ColdShapes shapes{cold, report, {}};
    PricedTarget target(target_.get(), &shapes);
    PricedDraft draft(draft_.get(), &shapes);
    SpecCosts costs;
    const SpecRequest req = AdaptiveRequest(34, prompt, 60, &costs);
    Outcome out;
    const SpecResult r = RunSpeculative(req, tok(), target, &draft, [&](const StepEvent& ev) {
      out.ks.push_back(ev.k);
      return true;
    });
    EXPECT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.tokens, ref);
    EXPECT_EQ(static_cast<int>(out.ks.size()), r.stats.steps);  // every step counted, cold or not
    int cold_calls = 0;
    for (const auto& [key, n] : shapes.calls) cold_calls += cold ? n / 3 : 0;
    if (cold) {
      EXPECT_GT(cold_calls, 3);
    }
    // (Without the resume cells: the draft's open, which a resume is priced
    // from, is timed on the clock, not priced by the shapes.)
    out.costs = std::regex_replace(costs.ToString(), std::regex(R"(resume\[\d+\]=[0-9.]+ms ?)"), "");
    out.verify4 = costs.Verify(4).value_or(0);
    return out;
  };
  const Outcome warm = run(false, false), reported = run(true, true), unreported = run(true, false);
  ASSERT_GT(warm.ks.size(), 4u);
  EXPECT_EQ(reported.ks, warm.ks);
  EXPECT_EQ(reported.costs, warm.costs);
  EXPECT_DOUBLE_EQ(reported.verify4, 0.240);
  EXPECT_NE(unreported.costs, warm.costs);
}

// A step that ran beside another request's prefill (a SpecCosts::Prefill
// held here as the loop holds one around each open) teaches no costs: its
// forwards shared the device or the CPU with that prefill. The same slow
// forwards with nothing beside them are learned.
TEST_F(SpecLoopTest, StepsBesideAPrefillDoNotFeedTheCostCells) {
  const std::vector<int32_t> prompt = tok().Encode("def main():\n    return 0", true, false);
  const std::vector<int32_t> ref = ReferenceGreedy(prompt, 40);
  SpecCosts costs;
  auto run = [&](bool slow, int32_t seq) {
    ColdShapes shapes{slow, false, {}};  // slow: every third call of a length 5x, not said to be cold
    PricedTarget target(target_.get(), &shapes);
    PricedDraft draft(draft_.get(), &shapes);
    const SpecResult r = RunSpeculative(AdaptiveRequest(seq, prompt, 40, &costs), tok(), target, &draft, nullptr);
    EXPECT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.tokens, ref);
    EXPECT_GT(r.stats.steps, 4);
  };
  run(false, 40);
  const std::string learned = costs.ToString();
  {
    const SpecCosts::Prefill beside(&costs);
    run(true, 41);
  }
  EXPECT_EQ(costs.ToString(), learned);
  run(true, 42);
  EXPECT_NE(costs.ToString(), learned);
}

// The cells' keying rule: alone (or not reported), a call's own length; shared, the batch's tokens (a
// verify) or forwards (a proposal).
TEST(CostCells, AloneOwnLengthSharedTheBatchs) {
  VerifyFigures vf;
  EXPECT_EQ(VerifyCostCell(vf, 3), 3);  // not reported
  vf.batch_seqs = 1;
  vf.batch_tokens = 4;
  EXPECT_EQ(VerifyCostCell(vf, 3), 3);  // alone
  vf.batch_seqs = 6;
  vf.batch_tokens = 6 * 5;
  EXPECT_EQ(VerifyCostCell(vf, 0), 29);  // a target-only member of a batch drafting 4 each: 30 tokens
  vf.batch_tokens = 1 + 5 * 9;
  EXPECT_EQ(VerifyCostCell(vf, 0), 45);
  vf.batch_tokens = 200;
  EXPECT_EQ(VerifyCostCell(vf, 0), SpecCosts::kMaxLen);  // past the cells: the last
  ProposeFigures pf;
  pf.forwards = 2;
  auto cell = [&] {
    const DraftCell c = DraftCostCell(pf);
    return std::make_tuple(c.members, c.forwards, c.plain);
  };
  EXPECT_EQ(cell(), std::make_tuple(1, 2, true));  // not reported
  pf.batch_seqs = 1;
  pf.batch_forwards = 2;
  EXPECT_EQ(cell(), std::make_tuple(1, 2, true));  // alone
  pf.batch_seqs = 6;
  pf.batch_forwards = 8;
  EXPECT_EQ(cell(), std::make_tuple(6, 8, true));  // the batch ran as long as its longest member
  pf.batch_mixed = true;
  EXPECT_EQ(cell(), std::make_tuple(6, 8, false));  // its members ran different lengths: counts as cold
  pf.batch_seqs = 40;
  pf.batch_forwards = 100;
  EXPECT_EQ(cell(), std::make_tuple(SpecCosts::kMaxMembers, SpecCosts::kMaxLen, false));
}

// LocalDraft's batches: every proposal reports the sequences that drafted and the forwards the batch ran.
TEST_F(SpecLoopTest, ProposeBatchReportsItsShape) {
  SamplingParams greedy;
  const std::vector<int32_t> a = tok().Encode("Hello world", true, false);
  const std::vector<int32_t> b = tok().Encode("The quick brown fox", true, false);
  ASSERT_TRUE(draft_->OpenSeq(1, a, greedy).ok());
  ASSERT_TRUE(draft_->OpenSeq(2, b, greedy).ok());
  ProposeRequest ra;
  ra.seq = 1;
  ra.base_len = static_cast<int64_t>(a.size());
  ra.k = 2;
  ProposeRequest rb = ra;
  rb.seq = 2;
  rb.base_len = static_cast<int64_t>(b.size());
  rb.k = 5;
  const auto out = draft_->ProposeBatch({ra, rb});
  ASSERT_EQ(out.size(), 2u);
  for (const auto& p : out) {
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->figures.batch_seqs, 2);
    EXPECT_EQ(p->figures.batch_forwards, 5);
    EXPECT_TRUE(p->figures.batch_mixed);  // 2 and 5 forwards
  }
  EXPECT_EQ(out[0]->figures.forwards, 2);
  EXPECT_EQ(out[1]->figures.forwards, 5);
  EXPECT_EQ(out[0]->figures.forward_seconds, out[1]->figures.forward_seconds);  // both paid the whole batch
  // The same length each: plain; then one member first catching up on five tokens: mixed.
  ASSERT_TRUE(draft_->OpenSeq(3, a, greedy).ok());
  ASSERT_TRUE(draft_->OpenSeq(4, b, greedy).ok());
  ProposeRequest rc = ra, rd = rb;
  rc.seq = 3;
  rd.seq = 4;
  rc.k = rd.k = 3;
  for (const auto& p : draft_->ProposeBatch({rc, rd})) {
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->figures.batch_forwards, 3);
    EXPECT_FALSE(p->figures.batch_mixed);
  }
  for (int32_t seq : {1, 2, 3, 4}) EXPECT_TRUE(draft_->ReleaseSeq(seq));  // (slots)
  ASSERT_TRUE(draft_->OpenSeq(5, a, greedy).ok());
  ASSERT_TRUE(draft_->OpenSeq(6, b, greedy).ok());
  rc.seq = 5;
  rd.seq = 6;
  rd.new_tokens = tok().Encode(" jumps over the lazy dog", false, false);
  ASSERT_GE(rd.new_tokens.size(), 3u);
  for (const auto& p : draft_->ProposeBatch({rc, rd})) {
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(p->figures.batch_mixed);
  }
}

// The workers run a batch's members in a canonical order (longest first, so
// that a forward's CUDA graph depends on the lengths, not on the calls'
// arrival): each call still gets its own answer, the one it gets alone.
TEST_F(SpecLoopTest, BatchesAnswerEachCallWhateverOrderTheyRunIn) {
  SamplingParams greedy;
  const std::vector<std::vector<int32_t>> prompts = {tok().Encode("Hello world", true, false),
                                                     tok().Encode("The quick brown fox", true, false),
                                                     tok().Encode("def main():", true, false)};
  const int ks[] = {1, 4, 2};
  auto solo_engine = MakeTestEngine(g_models->draft);
  auto solo = LocalDraft::Create(solo_engine.get(), 8);
  ASSERT_TRUE(solo.ok());
  std::vector<ProposeRequest> reqs;
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(draft_->OpenSeq(i, prompts[i], greedy).ok());
    ASSERT_TRUE((*solo)->OpenSeq(i, prompts[i], greedy).ok());
    ProposeRequest r;
    r.seq = i;
    r.base_len = static_cast<int64_t>(prompts[i].size());
    r.k = ks[i];
    reqs.push_back(r);
    auto p = (*solo)->ProposeBatch({r});
    ASSERT_TRUE(p[0].ok()) << p[0].status();
    alone.push_back(p[0]->tokens);
  }
  const auto batch = draft_->ProposeBatch(reqs);  // runs as 1, 2, 0
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(batch[i].ok()) << batch[i].status();
    EXPECT_EQ(batch[i]->tokens, alone[i]) << "sequence " << i;
    EXPECT_EQ(static_cast<int>(batch[i]->tokens.size()), ks[i]);
  }
  // The target: a target-only step, then two proposals of different lengths.
  auto solo_target_engine = MakeTestEngine(g_models->target);
  LocalTarget solo_target(solo_target_engine.get());
  std::vector<LocalTarget::VerifyJob> jobs;
  std::vector<Verdict> verdicts_alone;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(target_->OpenSeq(i, prompts[i], greedy).ok());
    ASSERT_TRUE(solo_target.OpenSeq(i, prompts[i], greedy).ok());
    LocalTarget::VerifyJob j{i, i == 0 ? std::vector<int32_t>{} : alone[i], ExchangeRef{}};
    auto v = solo_target.VerifyBatch({j});
    ASSERT_TRUE(v[0].ok()) << v[0].status();
    verdicts_alone.push_back(*v[0]);
    jobs.push_back(j);
  }
  const auto verdicts = target_->VerifyBatch(jobs);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(verdicts[i].ok()) << verdicts[i].status();
    EXPECT_EQ(verdicts[i]->appended, verdicts_alone[i].appended) << "sequence " << i;
    EXPECT_EQ(verdicts[i]->n_accepted, verdicts_alone[i].n_accepted) << "sequence " << i;
    EXPECT_EQ(verdicts[i]->figures.batch_seqs, 3);
  }
}

TEST_F(SpecLoopTest, StopStringEndsBeforeTheStop) {
  SpecRequest req;
  req.seq = 9;
  req.prompt = tok().Encode("Hello world", true, false);
  req.max_tokens = 40;
  req.ignore_eos = true;
  req.k = 3;
  const SpecResult full = Run(req, draft_.get());
  ASSERT_GT(full.text.size(), 12u);
  // A stop string from the middle of the output.
  const std::string stop = full.text.substr(full.text.size() / 2, 3);
  const size_t cut = full.text.find(stop);
  req.stop = {stop};
  std::vector<StepEvent> events;
  const SpecResult r = Run(req, draft_.get(), &events);
  EXPECT_EQ(r.reason, FinishReason::kStop);
  EXPECT_EQ(r.stop, stop);
  EXPECT_EQ(r.text, full.text.substr(0, cut));
  std::string streamed;
  for (const auto& ev : events) streamed += ev.text;
  EXPECT_EQ(streamed, r.text);
  EXPECT_LT(r.tokens.size(), full.tokens.size());
}

TEST_F(SpecLoopTest, MaxTokensTrimsTheLastStep) {
  for (int max_tokens : {1, 2, 5, 17}) {
    SpecRequest req;
    req.seq = 10;
    req.prompt = tok().Encode("1, 2, 3,", true, false);
    req.max_tokens = max_tokens;
    req.ignore_eos = true;
    req.k = 8;
    const SpecResult r = Run(req, draft_.get());
    EXPECT_EQ(r.reason, FinishReason::kLength);
    EXPECT_EQ(static_cast<int>(r.tokens.size()), max_tokens);
    EXPECT_EQ(r.tokens, ReferenceGreedy(req.prompt, max_tokens));
  }
}

TEST_F(SpecLoopTest, EosEndsGenerationWithoutEmittingIt) {
  // Hot sampling reaches an end-of-generation token soon. The same seed and k
  // give the same tokens with and without ignore_eos, up to the eos.
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SpecRequest req;
    req.seq = 11;
    req.prompt = tok().Encode("Hello world", true, false);
    req.sampling.temperature = 3.0f;
    req.sampling.seed = seed;
    req.max_tokens = 300;
    req.k = 4;
    req.ignore_eos = true;
    const SpecResult all = Run(req, draft_.get());
    size_t eog = 0;
    while (eog < all.tokens.size() && !tok().IsEog(all.tokens[eog])) ++eog;
    if (eog == all.tokens.size()) continue;
    req.ignore_eos = false;
    const SpecResult r = Run(req, draft_.get());
    EXPECT_EQ(r.reason, FinishReason::kEos);
    EXPECT_EQ(r.tokens, std::vector<int32_t>(all.tokens.begin(), all.tokens.begin() + static_cast<int64_t>(eog)));
    return;
  }
  FAIL() << "no sampled continuation reached an end-of-generation token";
}

TEST_F(SpecLoopTest, ContextLimitEndsWithLength) {
  SpecRequest req;
  req.seq = 12;
  req.prompt = tok().Encode("Once upon a time", true, false);
  req.max_tokens = 1000;
  req.ignore_eos = true;
  req.k = 8;
  req.max_context = static_cast<int>(req.prompt.size()) + 20;
  const SpecResult r = Run(req, draft_.get());
  EXPECT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.reason, FinishReason::kLength);
  EXPECT_EQ(req.prompt.size() + r.tokens.size(), static_cast<size_t>(req.max_context));
}

TEST_F(SpecLoopTest, CancelAndDeadlineReleaseBothSequences) {
  SpecRequest req;
  req.seq = 13;
  req.prompt = tok().Encode("Hello world", true, false);
  req.max_tokens = 400;
  req.ignore_eos = true;
  req.k = 4;
  int steps = 0;
  req.cancelled = [&] { return steps >= 3; };
  const SpecResult c = RunSpeculative(req, tok(), *target_, draft_.get(), [&](const StepEvent&) {
    ++steps;
    return true;
  });
  EXPECT_EQ(c.reason, FinishReason::kCancelled);
  EXPECT_EQ(c.stats.steps, 3);
  EXPECT_EQ(target_engine_->active_sequences(), 0);
  EXPECT_EQ(draft_engine_->active_sequences(), 0);

  req.cancelled = nullptr;
  req.deadline = std::chrono::system_clock::now() - std::chrono::seconds(1);
  const SpecResult d = Run(req, draft_.get());
  EXPECT_EQ(d.reason, FinishReason::kDeadline);
  EXPECT_EQ(target_engine_->active_sequences(), 0);
  EXPECT_EQ(draft_engine_->active_sequences(), 0);

  // A client that goes away (on_step returns false) cancels too.
  req.deadline = kNoDeadline;
  const SpecResult g = RunSpeculative(req, tok(), *target_, draft_.get(), [](const StepEvent&) { return false; });
  EXPECT_EQ(g.reason, FinishReason::kCancelled);
  EXPECT_EQ(target_engine_->active_sequences(), 0);
  EXPECT_EQ(draft_engine_->active_sequences(), 0);
}

// The warm-up asks for every length 0..k_max three times, greedy then sampled, through
// the real draft and target, and leaves nothing behind: both sequences
// released, and the same greedy output as a fresh request after it. Its step
// costs go to the table it is given, every length's.
TEST_F(SpecLoopTest, WarmUpRunsEveryLengthThriceGreedyAndSampled) {
  const std::vector<int> schedule = WarmupSchedule(3);
  EXPECT_EQ(schedule, (std::vector<int>{0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3}));
  WarmupOptions o;
  o.seq = 21;
  o.k_max = 3;
  SpecCosts costs;
  o.costs = &costs;
  const WarmupReport rep = WarmUp(tok(), *target_, draft_.get(), o);
  ASSERT_TRUE(rep.status.ok()) << rep.status;
  for (int k = 0; k <= 3; ++k) {
    EXPECT_EQ(costs.VerifyCount(k), 3) << k;  // the greedy pass's three (the CPU runs nothing cold)
    ASSERT_TRUE(costs.Verify(k).has_value()) << k;
    EXPECT_GT(*costs.Verify(k), 0.0) << k;
    if (k > 0) {
      EXPECT_TRUE(costs.Draft(k).has_value()) << k;
    }
  }
  EXPECT_EQ(costs.Table(3).known, true);
  o.costs = nullptr;
  EXPECT_EQ(rep.requests, 2);
  EXPECT_EQ(rep.steps, 24);
  std::vector<int> twice = schedule;
  twice.insert(twice.end(), schedule.begin(), schedule.end());
  EXPECT_EQ(rep.lengths, twice);  // a greedy draft proposes every token it is asked for
  EXPECT_EQ(rep.prompt_tokens, static_cast<int>(tok().Encode("The history of the city begins with a small harbour",
                                                               true, false).size()));
  EXPECT_EQ(rep.ToString().rfind("2 requests of a ", 0), 0u) << rep.ToString();
  EXPECT_EQ(target_engine_->active_sequences(), 0);
  EXPECT_EQ(draft_engine_->active_sequences(), 0);

  // Without a draft: target-only steps only.
  const WarmupReport solo = WarmUp(tok(), *target_, nullptr, o);
  ASSERT_TRUE(solo.status.ok()) << solo.status;
  EXPECT_EQ(solo.lengths, (std::vector<int>{0, 0, 0, 0, 0, 0}));

  // The prompt is as long as asked (the workers' largest forward), within the context.
  o.prompt_tokens = 40;
  EXPECT_EQ(WarmUp(tok(), *target_, draft_.get(), o).prompt_tokens, 40);
  o.max_context = 64;  // the schedule's 30 tokens, 8 spare, one for the bonus token
  const WarmupReport tight = WarmUp(tok(), *target_, draft_.get(), o);
  ASSERT_TRUE(tight.status.ok()) << tight.status;
  EXPECT_EQ(tight.prompt_tokens, 64 - 38 - 1);
  o.prompt_tokens = 0;
  o.max_context = 0;

  // Requests after it are what they were.
  const std::vector<int32_t> prompt = tok().Encode("The quick brown fox", true, false);
  SpecRequest req;
  req.seq = 21;
  req.prompt = prompt;
  req.max_tokens = 24;
  req.ignore_eos = true;
  req.k = 3;
  const SpecResult r = Run(req, draft_.get());
  ASSERT_EQ(r.reason, FinishReason::kLength) << r.status;
  EXPECT_EQ(r.tokens, ReferenceGreedy(prompt, 24));

  // A warm-up past its deadline says so.
  o.deadline = std::chrono::system_clock::now() - std::chrono::seconds(1);
  EXPECT_EQ(WarmUp(tok(), *target_, draft_.get(), o).status.code(), absl::StatusCode::kDeadlineExceeded);
}

// The warm-up's cold steps price no overhead: its table, which the requests
// after it start from, holds the warm steps' (a capture's host time had
// priced a drafting step's overhead at milliseconds on the GPU, and the
// adaptive policy of a 30%-acceptance pair ran 60% of its steps target-only:
// round 37).
TEST_F(SpecLoopTest, WarmUpColdStepsPriceNoOverhead) {
  ColdShapes c;
  c.host_ms = 40;
  PricedTarget target(target_.get(), &c);
  PricedDraft draft(draft_.get(), &c);
  WarmupOptions o;
  o.seq = 22;
  o.k_max = 3;
  SpecCosts costs;
  o.costs = &costs;
  const WarmupReport rep = WarmUp(tok(), target, &draft, o);
  ASSERT_TRUE(rep.status.ok()) << rep.status;
  EXPECT_EQ(rep.steps, 24);
  EXPECT_GT(c.calls.size(), 4u);
  const CostTable t = costs.Table(3);
  ASSERT_TRUE(t.known);
  // Every length ran warm once a pass: each verify cell holds the greedy pass's (the sampled pass keeps its own).
  for (int k = 0; k <= 3; ++k) EXPECT_EQ(costs.VerifyCount(k), 1) << k;
  // The 40 ms of a cold call are not in the overhead (the CPU's own is well under 10 ms a step).
  EXPECT_LT(t.overhead_draft, 0.010) << costs.ToString();
  EXPECT_LT(t.overhead_target, 0.010) << costs.ToString();
  EXPECT_NE(costs.ToString().find("overhead[1]="), std::string::npos) << costs.ToString();
}

// A draft that fails now and then, the way a remote one does.
class FlakyDraft : public Proposer {
 public:
  FlakyDraft(LocalDraft* d, absl::StatusCode code) : d_(d), code_(code) {}
  absl::Status Open(int32_t seq, const std::vector<int32_t>& t, const SamplingParams& s, Deadline dl) override {
    ++opens;
    return d_->Open(seq, t, s, dl);
  }
  absl::StatusOr<Proposal> Propose(const ProposeRequest& req, Deadline dl) override {
    if (++calls % 3 == 0) return absl::Status(code_, "injected draft failure");
    return d_->Propose(req, dl);
  }
  void Release(int32_t seq) override { d_->Release(seq); }
  int calls = 0, opens = 0;

 private:
  LocalDraft* d_;
  absl::StatusCode code_;
};

// A draft in another process (OpensBesideTheTarget) whose Open is recorded;
// the target's Open below waits for it to have run, which it does only when
// the loop issues the two prefills together.
class BesideDraft final : public ForwardingProposer {
 public:
  BesideDraft(Proposer* inner, absl::Status open_status = absl::OkStatus())
      : ForwardingProposer(inner), open_status_(std::move(open_status)) {}
  absl::Status Open(int32_t seq, const std::vector<int32_t>& t, const SamplingParams& s, Deadline dl) override {
    absl::Status st = open_status_.ok() ? ForwardingProposer::Open(seq, t, s, dl) : open_status_;
    opens.fetch_add(1);
    return st;
  }
  void Release(int32_t seq) override {
    releases.fetch_add(1);
    ForwardingProposer::Release(seq);
  }
  bool OpensBesideTheTarget() const override { return true; }
  std::atomic<int> opens{0}, releases{0};

 private:
  absl::Status open_status_;
};

class WaitingTarget final : public ForwardingVerifier {
 public:
  WaitingTarget(Verifier* inner, const BesideDraft* draft, absl::Status open_status = absl::OkStatus())
      : ForwardingVerifier(inner), draft_(draft), open_status_(std::move(open_status)) {}
  absl::Status Open(int32_t seq, const std::vector<int32_t>& t, const SamplingParams& s, Deadline dl) override {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (draft_->opens.load() == 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    draft_opened_first = draft_->opens.load() > 0;
    return open_status_.ok() ? ForwardingVerifier::Open(seq, t, s, dl) : open_status_;
  }
  bool draft_opened_first = false;

 private:
  const BesideDraft* draft_;
  absl::Status open_status_;
};

// A draft in another process prefills the prompt beside the target's
// prefill, not after it: the first step drafts (no Open of its own, so in a
// lockstep cohort it steps with the others), the output is the target's.
TEST_F(SpecLoopTest, ARemoteDraftOpensBesideTheTargetsPrefill) {
  const std::vector<int32_t> prompt = tok().Encode("def add(a, b):\n    return", true, false);
  const std::vector<int32_t> ref = ReferenceGreedy(prompt, 24);
  BesideDraft draft(draft_.get());
  WaitingTarget target(target_.get(), &draft);
  std::vector<StepEvent> events;
  const SpecResult r = RunSpeculative(FixedRequest(21, prompt, 24, 3), tok(), target, &draft, [&](const StepEvent& ev) {
    events.push_back(ev);
    return true;
  });
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_TRUE(target.draft_opened_first) << "the draft's Open waited for the target's prefill";
  EXPECT_EQ(r.tokens, ref);
  EXPECT_EQ(draft.opens.load(), 1);
  ASSERT_FALSE(events.empty());
  EXPECT_TRUE(events[0].draft_used) << "the first step drafts";
  EXPECT_EQ(r.stats.draft_failures, 0);
  EXPECT_EQ(draft.releases.load(), 1);
  EXPECT_EQ(draft_engine_->active_sequences(), 0);

  // A chain opens beside the prefill when every member can (n-gram lookup indexes on the host).
  NgramProposer ngram;
  BesideDraft member(draft_.get());
  ProposerChain chain({&ngram, &member});
  EXPECT_TRUE(chain.OpensBesideTheTarget());
  EXPECT_FALSE(ProposerChain({&ngram, draft_.get()}).OpensBesideTheTarget()) << "an in-process draft opens after";
  WaitingTarget chained(target_.get(), &member);
  const SpecResult c = RunSpeculative(FixedRequest(25, prompt, 24, 3), tok(), chained, &chain, {});
  ASSERT_TRUE(c.status.ok()) << c.status;
  EXPECT_TRUE(chained.draft_opened_first);
  EXPECT_EQ(c.tokens, ref);
  EXPECT_EQ(member.releases.load(), 1);

  // A target-only request does not open the draft at all.
  BesideDraft idle(draft_.get());
  SpecRequest off = FixedRequest(22, prompt, 8, 0);
  const SpecResult t = RunSpeculative(off, tok(), *target_, &idle, {});
  ASSERT_TRUE(t.status.ok()) << t.status;
  EXPECT_EQ(t.tokens, std::vector<int32_t>(ref.begin(), ref.begin() + 8));
  EXPECT_EQ(idle.opens.load(), 0);
  EXPECT_EQ(idle.releases.load(), 0);
}

// The draft's Open failing beside the prefill is a draft failure (the steps
// run target-only, then reopen it); the target's failing ends the request
// and releases the draft's sequence too.
TEST_F(SpecLoopTest, AFailedOpenBesideThePrefillLosesNothing) {
  const std::vector<int32_t> prompt = tok().Encode("The quick brown fox", true, false);
  const std::vector<int32_t> ref = ReferenceGreedy(prompt, 20);
  {
    BesideDraft draft(draft_.get(), absl::UnavailableError("injected: the draft worker is down"));
    SpecRequest req = FixedRequest(23, prompt, 20, 3);
    req.draft_retry = std::chrono::milliseconds(0);
    std::vector<StepEvent> events;
    const SpecResult r = Run(req, &draft, &events);
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.tokens, ref);
    EXPECT_GE(r.stats.draft_failures, 1);
    ASSERT_FALSE(events.empty());
    EXPECT_FALSE(events[0].draft_used);
    EXPECT_EQ(draft.releases.load(), 1);
  }
  {
    BesideDraft draft(draft_.get());
    WaitingTarget target(target_.get(), &draft, absl::UnavailableError("injected: the target worker is down"));
    const SpecResult r = RunSpeculative(FixedRequest(24, prompt, 20, 3), tok(), target, &draft, {});
    EXPECT_EQ(r.reason, FinishReason::kError);
    EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
    EXPECT_TRUE(r.tokens.empty());
    EXPECT_EQ(draft.opens.load(), 1);
    EXPECT_EQ(draft.releases.load(), 1);
    EXPECT_EQ(draft_engine_->active_sequences(), 0);
  }
}

TEST_F(SpecLoopTest, DraftFailuresFallBackToTargetOnlyAndReopen) {
  const std::vector<int32_t> prompt = tok().Encode("The quick brown fox", true, false);
  const std::vector<int32_t> ref = ReferenceGreedy(prompt, 60);
  for (absl::StatusCode code : {absl::StatusCode::kUnavailable, absl::StatusCode::kAborted}) {
    FlakyDraft flaky(draft_.get(), code);
    SpecRequest req;
    req.seq = 14;
    req.prompt = prompt;
    req.max_tokens = 60;
    req.ignore_eos = true;
    req.k = 3;
    req.draft_retry = std::chrono::milliseconds(0);
    std::vector<StepEvent> events;
    const SpecResult r = Run(req, &flaky, &events);
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.tokens, ref);
    EXPECT_GT(r.stats.draft_failures, 0);
    EXPECT_GT(flaky.opens, 1) << "the draft is reopened after a failure";
    int target_only = 0;
    for (const auto& ev : events) target_only += !ev.draft_used;
    EXPECT_GT(target_only, 0);
    EXPECT_GT(r.stats.speculative_steps, 0);
    EXPECT_EQ(draft_engine_->active_sequences(), 0);
  }
}

TEST_F(SpecLoopTest, PermanentDraftErrorsStopUsingTheDraft) {
  FlakyDraft flaky(draft_.get(), absl::StatusCode::kOutOfRange);
  SpecRequest req;
  req.seq = 15;
  req.prompt = tok().Encode("a", true, false);
  req.max_tokens = 40;
  req.ignore_eos = true;
  req.k = 2;
  req.draft_retry = std::chrono::milliseconds(0);
  const SpecResult r = Run(req, &flaky);
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.tokens, ReferenceGreedy(req.prompt, 40));
  EXPECT_EQ(r.stats.draft_failures, 1);
  EXPECT_EQ(flaky.calls, 3);
}

// ---------------------------------------------------------------- pipelined verify

// The gRPC target's pipelining, in process: VerifyNext waits on a thread of
// its own for the draft to publish in the exchange slot, then verifies what it
// finds there (LocalTarget, like the target worker's engine thread, checks it
// against its own mapping). The loop thread meanwhile runs the Propose on the
// draft's engine, as the coordinator's does over gRPC.
class PipelinedTarget final : public Verifier {
 public:
  PipelinedTarget(LocalTarget* t, const std::string& exchange) : t_(t) {
    auto xb = ExchangeBuffer::Attach("posix", exchange);
    EXPECT_TRUE(xb.ok()) << xb.status();
    if (xb.ok()) xb_ = std::move(*xb);
  }
  absl::Status Open(int32_t seq, const std::vector<int32_t>& tokens, const SamplingParams& s, Deadline dl) override {
    return t_->Open(seq, tokens, s, dl);
  }
  absl::StatusOr<Verdict> Verify(int32_t seq, const std::vector<int32_t>& p, const ExchangeRef& ref,
                                 const CohortTag& cohort, Deadline dl) override {
    ++sequential;
    return t_->Verify(seq, p, ref, cohort, dl);
  }
  void Release(int32_t seq) override { t_->Release(seq); }
  std::unique_ptr<PendingVerdict> VerifyNext(int32_t seq, const ExchangeRef& after, int k, const CohortTag&,
                                             Deadline dl) override {
    ++started;
    return std::make_unique<Pending>(this, seq, after, k, dl);
  }
  bool TakesNextProposal() const override { return true; }
  int started = 0, sequential = 0;
  std::atomic<int> abandoned{0};

 private:
  class Pending final : public PendingVerdict {
   public:
    Pending(PipelinedTarget* o, int32_t seq, ExchangeRef after, int k, Deadline dl) {
      th_ = std::thread([this, o, seq, after, k, dl] {
        for (int i = 0; i < 2000; ++i) {
          if (auto p = o->xb_->PublishedAfter(after.slot, seq, after.generation)) {
            if (static_cast<int>(p->tokens.size()) > k) {
              result_ = absl::FailedPreconditionError("too many tokens");
              return;
            }
            result_ = o->t_->Verify(seq, p->tokens, p->ref, {}, dl);
            if (result_.ok()) {
              result_->proposal = p->tokens;
              result_->ref = p->ref;
            }
            return;
          }
          if (abandon_.load()) {
            ++o->abandoned;
            result_ = absl::AbortedError("abandoned");
            return;
          }
          o->xb_->WaitForChange(after.slot, o->xb_->Generation(after.slot), std::chrono::milliseconds(1));
        }
        result_ = absl::AbortedError("no proposal in time");
      });
    }
    ~Pending() override {
      abandon_ = true;
      if (th_.joinable()) th_.join();
    }
    void Abandon() override { abandon_ = true; }
    absl::StatusOr<Verdict> Wait() override {
      th_.join();
      return result_;
    }

   private:
    std::atomic<bool> abandon_{false};
    absl::StatusOr<Verdict> result_ = absl::UnknownError("not run");
    std::thread th_;
  };
  LocalTarget* t_;
  std::unique_ptr<ExchangeBuffer> xb_;
};

// The draft over "gRPC": publishes every proposal; every `fail_every`-th
// Propose fails, before the draft ran (`after` false) or after it published.
class PublishingDraft final : public Proposer {
 public:
  PublishingDraft(LocalDraft* d, int fail_every, bool after) : d_(d), fail_every_(fail_every), after_(after) {}
  absl::Status Open(int32_t seq, const std::vector<int32_t>& t, const SamplingParams& s, Deadline dl) override {
    return d_->Open(seq, t, s, dl);
  }
  absl::StatusOr<Proposal> Propose(const ProposeRequest& req, Deadline dl) override {
    const bool fail = fail_every_ > 0 && ++calls_ % fail_every_ == 0;
    if (fail && !after_) return absl::UnavailableError("injected failure before the draft ran");
    auto p = d_->Propose(req, dl);
    if (fail) return absl::DeadlineExceededError("injected failure after the draft published");
    return p;
  }
  void Release(int32_t seq) override { d_->Release(seq); }
  bool PublishesEveryProposal() const override { return true; }

 private:
  LocalDraft* d_;
  int fail_every_, calls_ = 0;
  bool after_;
};

TEST_F(SpecLoopTest, PipelinedVerifyTakesTheProposalFromTheExchangeAndIsLossless) {
  PipelinedTarget piped(target_.get(), draft_->exchange().name());
  for (const auto& prompt : Prompts(4)) {
    const std::vector<int32_t> ref = ReferenceGreedy(prompt, 40);
    for (int k : {1, 3, 6}) {
      PublishingDraft draft(draft_.get(), 0, false);
      SpecRequest req = FixedRequest(21, prompt, 40, k);
      const int started = piped.started;
      std::vector<StepEvent> events;
      const SpecResult r = RunSpeculative(req, tok(), piped, &draft, [&](const StepEvent& ev) {
        events.push_back(ev);
        return true;
      });
      ASSERT_TRUE(r.status.ok()) << r.status;
      ASSERT_EQ(r.tokens, ref) << "k=" << k;
      // Every step but the first (no earlier proposal names the slot) and the
      // last ones that asked for no draft is pipelined, and none fell back.
      EXPECT_EQ(r.stats.pipeline_fallbacks, 0);
      EXPECT_EQ(r.stats.pipelined_steps, piped.started - started);
      EXPECT_GE(r.stats.pipelined_steps, r.stats.steps - 2) << "k=" << k;
      for (const StepEvent& ev : events) {
        EXPECT_GE(ev.time.transport, 0.0);
        EXPECT_LE(ev.accepted, ev.proposed);
      }
    }
  }
  // Pipelining off: the same output, every verify after its proposal.
  PublishingDraft draft(draft_.get(), 0, false);
  SpecRequest req = FixedRequest(22, tok().Encode("Hello world", true, false), 30, 4);
  req.pipeline_verify = false;
  const int started = piped.started;
  const SpecResult r = RunSpeculative(req, tok(), piped, &draft, nullptr);
  ASSERT_TRUE(r.status.ok());
  EXPECT_EQ(r.tokens, ReferenceGreedy(req.prompt, 30));
  EXPECT_EQ(piped.started, started);
  EXPECT_EQ(r.stats.pipelined_steps, 0);
}

TEST_F(SpecLoopTest, PipelinedVerifyKeepsTheSampledOutputOfTheSequentialOne) {
  PipelinedTarget piped(target_.get(), draft_->exchange().name());
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.top_p = 0.95f;
  sp.seed = 77;
  std::vector<int32_t> outs[2];
  for (int pipelined = 0; pipelined < 2; ++pipelined) {
    PublishingDraft draft(draft_.get(), 0, false);
    SpecRequest req = FixedRequest(23, tok().Encode("def main():", true, false), 48, 4);
    req.sampling = sp;
    req.pipeline_verify = pipelined == 1;
    const SpecResult r = RunSpeculative(req, tok(), piped, &draft, nullptr);
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.stats.pipelined_steps > 0, pipelined == 1);
    EXPECT_EQ(r.stats.pipeline_fallbacks, 0);
    outs[pipelined] = r.tokens;
  }
  EXPECT_EQ(outs[0], outs[1]) << "the same proposals and rows, verified the same way";
}

TEST_F(SpecLoopTest, PipelinedVerifySurvivesProposeFailuresBeforeAndAfterPublication) {
  const std::vector<int32_t> prompt = tok().Encode("The quick brown fox", true, false);
  const std::vector<int32_t> ref = ReferenceGreedy(prompt, 60);
  for (bool after : {false, true}) {
    PipelinedTarget piped(target_.get(), draft_->exchange().name());
    PublishingDraft draft(draft_.get(), 4, after);
    SpecRequest req = FixedRequest(24, prompt, 60, 3);
    req.draft_retry = std::chrono::milliseconds(0);
    const SpecResult r = RunSpeculative(req, tok(), piped, &draft, nullptr);
    ASSERT_TRUE(r.status.ok()) << r.status;
    EXPECT_EQ(r.tokens, ref) << (after ? "failures after publication" : "failures before the draft ran");
    EXPECT_GT(r.stats.draft_failures, 0);
    EXPECT_GT(r.stats.pipelined_steps, 0);
    if (after) {
      // The target took the published proposal: the verdict is the step.
      EXPECT_EQ(piped.abandoned.load(), 0);
      EXPECT_EQ(r.stats.pipeline_fallbacks, 0);
    } else {
      // Abandoned, and the step ran target-only.
      EXPECT_GT(piped.abandoned.load(), 0);
      EXPECT_EQ(r.stats.pipeline_fallbacks, piped.abandoned.load());
    }
    EXPECT_EQ(draft_engine_->active_sequences(), 0);
    EXPECT_EQ(target_engine_->active_sequences(), 0);
  }
}

TEST_F(SpecLoopTest, BadRequestsAreErrors) {
  SpecRequest req;
  req.seq = 16;
  EXPECT_EQ(Run(req, draft_.get()).status.code(), absl::StatusCode::kInvalidArgument);  // empty prompt
  req.prompt = {1, 2};
  req.max_tokens = 0;
  EXPECT_EQ(Run(req, draft_.get()).status.code(), absl::StatusCode::kInvalidArgument);
  req.max_tokens = 4;
  req.prompt.assign(600, 5);  // longer than max-seq-len 512
  const SpecResult r = Run(req, draft_.get());
  EXPECT_EQ(r.reason, FinishReason::kError);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument) << r.status;
  EXPECT_EQ(target_engine_->active_sequences(), 0);
}


// ---------------------------------------------------------------- chunked prefill

TEST_F(SpecLoopTest, ChunkedPrefillGivesTheSameOutput) {
  const std::vector<int32_t> prompt = Prompts(4).back();  // a random prompt
  std::vector<int32_t> long_prompt;
  for (int i = 0; i < 6; ++i) long_prompt.insert(long_prompt.end(), prompt.begin(), prompt.end());
  const std::vector<int32_t> ref = ReferenceGreedy(long_prompt, 12);
  for (int64_t chunk : {1, 7, 64, 1000}) {
    ASSERT_TRUE(target_->OpenSeq(20, long_prompt, SamplingParams{}, /*prefill=*/false).ok());
    EXPECT_EQ(target_->core().PrefillPending(20), static_cast<int64_t>(long_prompt.size()) - 1);
    int rounds = 0;
    while (true) {
      auto left = target_->PrefillSeqs({PrefillSlice{20, chunk}});
      ASSERT_TRUE(left[0].ok()) << left[0].status();
      ++rounds;
      if (*left[0] == 0) break;
    }
    EXPECT_EQ(rounds, static_cast<int>((long_prompt.size() - 1 + chunk - 1) / chunk));
    std::vector<int32_t> out;
    for (int i = 0; i < 12; ++i) {
      auto step = target_->Verify(20, {}, ExchangeRef{}, {}, kNoDeadline);
      ASSERT_TRUE(step.ok()) << step.status();
      out.push_back(step->appended[0]);
    }
    EXPECT_EQ(out, ref) << "chunk " << chunk;
    target_->ReleaseSeq(20);
  }
  // Without any prefill the first step feeds the whole prompt itself: its
  // forward held more than the step's one token (batch_mixed: not that cell's
  // cost); the next step's did not.
  ASSERT_TRUE(target_->OpenSeq(21, long_prompt, SamplingParams{}, /*prefill=*/false).ok());
  auto step = target_->Verify(21, {}, ExchangeRef{}, {}, kNoDeadline);
  ASSERT_TRUE(step.ok());
  EXPECT_EQ(step->appended[0], ref[0]);
  EXPECT_EQ(target_->core().PrefillPending(21), 0);
  EXPECT_EQ(step->figures.batch_tokens, 1);
  EXPECT_TRUE(step->figures.batch_mixed);
  auto next = target_->Verify(21, {}, ExchangeRef{}, {}, kNoDeadline);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->appended[0], ref[1]);
  EXPECT_FALSE(next->figures.batch_mixed);
  // Slices for sequences that are not open, or twice in one pass, fail alone.
  ASSERT_TRUE(target_->OpenSeq(22, long_prompt, SamplingParams{}, /*prefill=*/false).ok());
  auto r = target_->PrefillSeqs({PrefillSlice{99, 4}, PrefillSlice{22, 4}, PrefillSlice{22, 4}});
  EXPECT_EQ(r[0].status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(r[1].ok());
  EXPECT_EQ(*r[1], static_cast<int64_t>(long_prompt.size()) - 1 - 4);
  EXPECT_EQ(r[2].status().code(), absl::StatusCode::kInvalidArgument);
  // Bad token ids are refused at Open, before anything is fed.
  EXPECT_EQ(target_->OpenSeq(23, {1, 2, 1 << 20}, SamplingParams{}, false).code(), absl::StatusCode::kInvalidArgument);
  target_->ReleaseSeq(21);
  target_->ReleaseSeq(22);
  EXPECT_EQ(target_engine_->active_sequences(), 0);
}

// ---------------------------------------------------------------- adaptive length

// Frozen costs: verify of k+1 tokens barely dearer than one, cheap drafts
// (speculation pays), or two tokens costing five times one (it never does).
void CheapVerify(SpecCosts* c) {
  for (int n = 0; n <= 8; ++n) c->ObserveVerify(n, 0.010 + 0.0005 * n);
  for (int f = 1; f <= 8; ++f) c->ObserveDraft(f, 0.001 * f);
  c->Freeze();
}
void DearVerify(SpecCosts* c) {
  c->ObserveVerify(0, 0.001);
  for (int n = 1; n <= 8; ++n) c->ObserveVerify(n, 0.005 + 0.001 * n);
  for (int f = 1; f <= 8; ++f) c->ObserveDraft(f, 0.0001 * f);
  c->Freeze();
}

TEST_F(SpecLoopTest, AdaptiveLengthIsLosslessAndFollowsTheCosts) {
  SpecCosts cheap, dear;
  CheapVerify(&cheap);
  DearVerify(&dear);
  int64_t spec_cheap = 0, spec_dear = 0, steps_dear = 0;
  std::vector<int64_t> hist(9, 0);
  for (const auto& prompt : Prompts(6)) {
    const std::vector<int32_t> ref = ReferenceGreedy(prompt, 40);
    for (SpecCosts* costs : {&cheap, &dear}) {
      const SpecRequest req = AdaptiveRequest(30, prompt, 40, costs);
      std::vector<StepEvent> events;
      const SpecResult r = Run(req, draft_.get(), &events);
      ASSERT_TRUE(r.status.ok()) << r.status;
      ASSERT_EQ(r.tokens, ref);
      int64_t sum = 0;
      for (size_t k = 0; k < r.stats.k_hist.size(); ++k) sum += r.stats.k_hist[k];
      EXPECT_EQ(sum, r.stats.steps);
      for (const StepEvent& ev : events) {
        EXPECT_LE(ev.proposed, ev.k);
        EXPECT_LE(ev.k, 8);
      }
      if (costs == &cheap) {
        spec_cheap += r.stats.speculative_steps;
        for (size_t k = 0; k < r.stats.k_hist.size(); ++k) hist[k] += r.stats.k_hist[k];
      } else {
        spec_dear += r.stats.speculative_steps;
        steps_dear += r.stats.steps;
      }
    }
  }
  EXPECT_GT(spec_cheap, 0);
  EXPECT_EQ(spec_dear, 0) << "drafting cannot pay: every step runs target-only";
  EXPECT_EQ(steps_dear, 14 * 40);
  // With cheap verifies it drafts more than one token per step on the whole.
  int64_t w = 0, n = 0;
  for (size_t k = 0; k < hist.size(); ++k) {
    w += static_cast<int64_t>(k) * hist[k];
    n += hist[k];
  }
  EXPECT_GT(static_cast<double>(w) / n, 1.0);
  EXPECT_EQ(draft_engine_->active_sequences(), 0);
}

TEST_F(SpecLoopTest, AdaptiveRequestsShareWhatTheyLearnOfThePair) {
  SpecCosts costs;
  CheapVerify(&costs);
  AcceptancePrior prior;
  int64_t spec_steps = 0;
  for (const auto& prompt : Prompts(2)) {
    SpecRequest req = AdaptiveRequest(32, prompt, 30, &costs);
    req.min_confidence = -1.0f;  // learned
    req.prior = &prior;
    const SpecResult r = Run(req, draft_.get());
    ASSERT_TRUE(r.status.ok()) << r.status;
    ASSERT_EQ(r.tokens, ReferenceGreedy(prompt, 30));
    spec_steps += r.stats.speculative_steps;
  }
  ASSERT_GT(spec_steps, 0);
  // Every speculative step fed the prior, and its first token's confidence.
  EXPECT_EQ(prior.steps(), spec_steps);
  const ConfidenceBins bins = prior.Confidence();
  double n = 0;
  for (double x : bins.n) n += x;
  EXPECT_EQ(n, static_cast<double>(spec_steps));
}

// Records what the loop asks of the draft.
class RecordingProposer final : public ForwardingProposer {
 public:
  using ForwardingProposer::ForwardingProposer;
  absl::StatusOr<Proposal> Propose(const ProposeRequest& req, Deadline d) override {
    asked.push_back(req);
    return ForwardingProposer::Propose(req, d);
  }
  std::vector<ProposeRequest> asked;
};

// A fresh adaptive request (no prior) does not cut proposals at a confidence
// it has not learned yet: random-weight drafts are unsure of every token and
// still right most of the time (round 7: a 0.5 cut held one to a single
// draft per step for 64 steps, 0.68x the best fixed k).
TEST_F(SpecLoopTest, AdaptiveDoesNotCutProposalsBeforeItLearnedTheThreshold) {
  SpecCosts costs;
  CheapVerify(&costs);
  AcceptancePrior prior;
  RecordingProposer rec(draft_.get());
  const std::vector<int32_t> prompt = tok().Encode("Once upon a time", true, false);
  SpecRequest req = AdaptiveRequest(33, prompt, 60, &costs);
  req.min_confidence = -1.0f;  // learned
  req.prior = &prior;
  const SpecResult r = Run(req, &rec);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.tokens, ReferenceGreedy(prompt, 60));
  ASSERT_GT(rec.asked.size(), 16u);
  // The threshold is learned from the first tokens of 16 proposals; until then no cut.
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(rec.asked[i].min_confidence, 0.0f) << "proposal " << i;
    EXPECT_TRUE(rec.asked[i].want_confidence);
  }
}

TEST_F(SpecLoopTest, CatchingUpAfterTargetOnlyStepsIsAResumeCost) {
  // Drafting on, then off for 10 steps (Admin.SetSpeculation), then on: the
  // first proposal after the pause first catches the draft up on what it
  // missed; that time is a resume cost, not a draft cost of its length.
  const std::vector<int32_t> prompt = tok().Encode("def main():", true, false);
  int step = 0;
  SpecRequest req;
  req.seq = 31;
  req.prompt = prompt;
  req.max_tokens = 50;
  req.ignore_eos = true;
  req.live_k = [&] { return step >= 5 && step < 15 ? 0 : 3; };
  SpecCosts costs;
  req.costs = &costs;
  std::vector<StepEvent> events;
  const SpecResult r = RunSpeculative(req, tok(), *target_, draft_.get(), [&](const StepEvent& ev) {
    events.push_back(ev);
    ++step;
    return true;
  });
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.tokens, ReferenceGreedy(prompt, 50));
  ASSERT_GT(events.size(), 16u);
  for (size_t i = 0; i < events.size(); ++i) {
    if (i == 15) {
      // The 10 target-only tokens and what step 4 appended.
      EXPECT_TRUE(events[i].draft_used);
      EXPECT_EQ(events[i].caught_up, 10 + events[4].appended);
    } else {
      EXPECT_EQ(events[i].caught_up, 0) << i;
    }
  }
  EXPECT_NE(costs.ToString().find(absl::StrCat("resume[", 10 + events[4].appended, "]=")), std::string::npos)
      << costs.ToString();
}

TEST_F(SpecLoopTest, GreedyConfidenceIsTheModelsTopProbability) {
  // Greedy distributions are one-hot; the confidence the draft reports is its
  // softmax's top probability, so min_confidence can stop a greedy proposal.
  const std::vector<int32_t> prompt = tok().Encode("Once upon a time", true, false);
  ASSERT_TRUE(draft_->OpenSeq(31, prompt, SamplingParams{}).ok());
  auto p = draft_->Propose({31, static_cast<int64_t>(prompt.size()), {}, 8, 0.0f, /*want_confidence=*/true}, kNoDeadline);
  ASSERT_TRUE(p.ok());
  ASSERT_EQ(p->confidence.size(), 8u);
  float lowest = 1;
  for (float c : p->confidence) {
    EXPECT_GT(c, 0.0f);
    EXPECT_LE(c, 1.0f);
    lowest = std::min(lowest, c);
  }
  EXPECT_LT(lowest, 1.0f);
  auto cut = draft_->Propose({31, static_cast<int64_t>(prompt.size()), {}, 8, 1.0f}, kNoDeadline);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->tokens.size(), 1u) << "the first draft is always proposed";
  draft_->ReleaseSeq(31);
}

TEST_F(SpecLoopTest, BenchComparesModesOnTheSameOutput) {
  BenchPair pair{target_.get(), draft_.get(), &tok()};
  std::vector<BenchPrompt> prompts;
  for (const auto& p : Prompts(2)) {
    BenchPrompt b;
    b.label = p.size() > 10 ? "long" : "short";
    b.tokens = p;
    b.max_tokens = 24;
    prompts.push_back(b);
  }
  SpecCosts costs;
  ASSERT_TRUE(CalibrateCosts(pair, prompts[0].tokens, 8, 2, &costs).ok());
  for (int n = 0; n <= 8; ++n) EXPECT_EQ(costs.VerifyCount(n), 1) << n;
  EXPECT_TRUE(costs.Draft(8).has_value());
  costs.Freeze();
  costs.ObserveVerify(0, 100.0);  // frozen
  EXPECT_LT(*costs.Verify(0), 100.0);
  std::vector<BenchResult> res;
  for (const BenchMode& m : {BenchMode::TargetOnly(), BenchMode::Fixed(3), BenchMode::Adaptive(8, 0.5f)}) {
    auto r = RunSpecBench(pair, prompts, m, &costs);
    ASSERT_TRUE(r.ok()) << r.status();
    res.push_back(*r);
  }
  for (const BenchResult& r : res) {
    ASSERT_EQ(r.prompts.size(), prompts.size());
    EXPECT_EQ(r.tokens, static_cast<int64_t>(prompts.size() * 24));
    int64_t steps = 0;
    for (int64_t n : r.k_hist) steps += n;
    EXPECT_EQ(steps, r.steps);
    EXPECT_GT(r.TokensPerSecond(), 0);
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(r.prompts[i].output, res[0].prompts[i].output) << r.mode;
  }
  EXPECT_EQ(res[0].speculative_steps, 0);
  // Modeled time prices each step with the table: target-only steps at Verify(0).
  EXPECT_NEAR(res[0].modeled_seconds, static_cast<double>(res[0].steps) * *costs.Verify(0), 1e-12);
  EXPECT_GT(res[1].modeled_seconds, 0);
  EXPECT_LE(res[1].k_hist.size(), 4u) << "fixed k=3 never verifies more than 3 drafts";
  EXPECT_GT(res[1].speculative_steps, 0);
  EXPECT_GT(res[1].AcceptanceRate(), 0);
  EXPECT_EQ(RunSpecBench(BenchPair{target_.get(), nullptr, &tok()}, prompts, BenchMode::Fixed(2), &costs).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(target_engine_->active_sequences(), 0);
}

}  // namespace
}  // namespace specd
