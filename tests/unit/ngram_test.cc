// n-gram (prompt-lookup) proposals: the lookup (common/spec/ngram.h), the
// Proposer around it, and choosing proposers by name (common/api/request.h).
// The loop's lossless runs with it are in spec_loop_test.cc.
#include <random>

#include "common/api/request.h"
#include "common/spec/ngram.h"
#include "gtest/gtest.h"

namespace specd {
namespace {

std::vector<int32_t> Lookup(const std::vector<int32_t>& tokens, int k, NgramOptions o = {}) {
  NgramIndex ix(o);
  ix.Sync(0, tokens);
  return ix.Lookup(k);
}

// The definition, by brute force: longest n first, the latest earlier
// occurrence (one with a token after it), then what followed it, repeating
// the proposal itself past the end.
std::vector<int32_t> Reference(const std::vector<int32_t>& t, int k, const NgramOptions& o) {
  const int64_t len = static_cast<int64_t>(t.size());
  for (int n = o.max_n; n >= o.min_n; --n) {
    if (n > len - 1) continue;
    for (int64_t end = len - 2; end >= n - 1; --end) {
      if (!std::equal(t.begin() + (end - n + 1), t.begin() + (end + 1), t.end() - n)) continue;
      std::vector<int32_t> out;
      for (int64_t i = 0; i < k; ++i) {
        const int64_t p = end + 1 + i;
        out.push_back(p < len ? t[static_cast<size_t>(p)] : out[static_cast<size_t>(p - len)]);
      }
      return out;
    }
  }
  return {};
}

TEST(NgramIndex, FindsWhatFollowedTheLatestOccurrence) {
  EXPECT_EQ(Lookup({1, 2, 3, 4, 5, 9, 1, 2, 3}, 2), (std::vector<int32_t>{4, 5}));
  // The latest of two occurrences of the suffix.
  EXPECT_EQ(Lookup({1, 2, 7, 1, 2, 8, 6, 1, 2}, 1), (std::vector<int32_t>{8}));
}

TEST(NgramIndex, PrefersTheLongerSuffix) {
  // "3" last occurred before 8, but "5 3" only before 9.
  EXPECT_EQ(Lookup({5, 3, 9, 7, 3, 8, 5, 3}, 1), (std::vector<int32_t>{9}));
  // Only a unigram matches: n = 1 finds it, min_n = 2 does not.
  EXPECT_EQ(Lookup({4, 6, 1, 2, 6}, 2), (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(Lookup({4, 6, 1, 2, 6}, 2, NgramOptions{2, 4}).empty());
}

TEST(NgramIndex, RespectsKAndRepeatsPastTheEnd) {
  const std::vector<int32_t> t = {1, 2, 3, 4, 5, 6, 1, 2};
  EXPECT_EQ(Lookup(t, 3), (std::vector<int32_t>{3, 4, 5}));
  EXPECT_TRUE(Lookup(t, 0).empty());
  // A loop: what followed "1 2" runs into the end of the sequence and goes on with the proposal.
  EXPECT_EQ(Lookup({1, 2, 1, 2}, 5), (std::vector<int32_t>{1, 2, 1, 2, 1}));
  EXPECT_EQ(Lookup({7, 7}, 3), (std::vector<int32_t>{7, 7, 7}));
}

TEST(NgramIndex, NothingWithoutAnEarlierOccurrence) {
  EXPECT_TRUE(Lookup({1, 2, 3, 4}, 4).empty());
  EXPECT_TRUE(Lookup({1}, 4).empty());
  EXPECT_TRUE(Lookup({}, 4).empty());
  // The suffix itself (no token after it) is not a match.
  EXPECT_TRUE(Lookup({9, 1, 2, 3}, 4, NgramOptions{3, 3}).empty());
}

TEST(NgramIndex, IncrementalEqualsTheDefinition) {
  std::mt19937 rng(3);
  for (const NgramOptions o : {NgramOptions{}, NgramOptions{2, 4}, NgramOptions{1, 1}, NgramOptions{3, 6}}) {
    for (int trial = 0; trial < 40; ++trial) {
      const int vocab = 2 + static_cast<int>(rng() % 6);  // small: many repeats
      NgramIndex ix(o);
      std::vector<int32_t> t;
      for (int step = 0; step < 60; ++step) {
        std::vector<int32_t> more(rng() % 4);
        for (auto& x : more) x = static_cast<int32_t>(rng() % vocab);
        int64_t base = static_cast<int64_t>(t.size());
        if (rng() % 10 == 0) base = static_cast<int64_t>(rng() % (t.size() + 1));  // a rollback now and then
        t.resize(static_cast<size_t>(base));
        t.insert(t.end(), more.begin(), more.end());
        ix.Sync(base, more);
        ASSERT_EQ(ix.tokens(), t);
        const int k = 1 + static_cast<int>(rng() % 8);
        ASSERT_EQ(ix.Lookup(k), Reference(t, k, o)) << o.ToString() << " trial " << trial << " step " << step;
      }
    }
  }
}

TEST(NgramProposer, SyncsProposesOneHotAndReleases) {
  NgramProposer p;
  const std::vector<int32_t> prompt = {10, 11, 12, 13, 14, 10, 11};
  ASSERT_TRUE(p.Open(1, prompt, SamplingParams{}, kNoDeadline).ok());
  auto a = p.Propose({1, 7, {}, 3}, kNoDeadline);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->tokens, (std::vector<int32_t>{12, 13, 14}));
  EXPECT_LT(a->ref.slot, 0) << "q one-hot at the tokens: no exchange rows";
  EXPECT_EQ(a->figures.forwards, 0);
  EXPECT_TRUE(a->confidence.empty());
  // Two accepted and a correction: the committed sequence grows by 3.
  auto b = p.Propose({1, 7, {12, 13, 99}, 4}, kNoDeadline);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->tokens.empty()) << "99 was never seen";
  auto c = p.Propose({1, 10, {10}, 2}, kNoDeadline);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->tokens, (std::vector<int32_t>{11, 12}));
  // A sync past the committed length is an error; an unknown sequence too.
  EXPECT_EQ(p.Propose({1, 50, {}, 2}, kNoDeadline).status().code(), absl::StatusCode::kOutOfRange);
  p.Release(1);
  EXPECT_EQ(p.Propose({1, 0, {}, 2}, kNoDeadline).status().code(), absl::StatusCode::kNotFound);
  // Bad sizes are refused at Open.
  NgramProposer bad(NgramOptions{3, 2});
  EXPECT_EQ(bad.Open(1, prompt, SamplingParams{}, kNoDeadline).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ProposerKind, NamesRoundTripAndUnknownNamesAreErrors) {
  for (api::ProposerKind k : {api::ProposerKind::kDraft, api::ProposerKind::kNgram, api::ProposerKind::kNgramDraft}) {
    auto p = api::ParseProposer(api::ProposerName(k));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, k);
  }
  auto bad = api::ParseProposer("eagle");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("ngram+draft"), std::string::npos) << bad.status();
  // The request's choice wins over the generator's.
  api::Request r;
  api::SpecDefaults d;
  d.proposer = api::ProposerKind::kNgram;
  EXPECT_EQ(api::ChooseSpeculation(r, d).proposer, api::ProposerKind::kNgram);
  r.proposer = api::ProposerKind::kNgramDraft;
  EXPECT_EQ(api::ChooseSpeculation(r, d).proposer, api::ProposerKind::kNgramDraft);
}

TEST(RequestProposer, MakesTheChosenProposerOfTheDraft) {
  NgramProposer draft;  // any proposer stands in for the draft here
  EXPECT_EQ(api::RequestProposer(api::ProposerKind::kDraft, {}, &draft).get(), &draft);
  EXPECT_EQ(api::RequestProposer(api::ProposerKind::kDraft, {}, nullptr).get(), nullptr) << "target-only";
  api::RequestProposer ngram(api::ProposerKind::kNgram, {}, &draft);
  EXPECT_TRUE(ngram.ngram_only());
  EXPECT_NE(ngram.get(), &draft);
  api::RequestProposer chain(api::ProposerKind::kNgramDraft, {}, &draft);
  EXPECT_FALSE(chain.ngram_only());
  EXPECT_NE(chain.get(), &draft);
  // Without a draft the chain is the n-gram proposer alone.
  EXPECT_TRUE(api::RequestProposer(api::ProposerKind::kNgramDraft, {}, nullptr).ngram_only());
}

}  // namespace
}  // namespace specd
