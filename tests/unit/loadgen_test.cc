// The load generator's and the tuner's pure parts: ranges, percentiles,
// prompt synthesis, JSON, spec checks, config-file rendering.
#include "cli/loadgen_lib.h"
#include "cli/tune_service.h"

#include <fstream>

#include "common/engine/engine.h"
#include "common/util/config.h"
#include "common/util/net.h"
#include "gtest/gtest.h"
#include "tests/support/test_util.h"

namespace specd::loadgen {
namespace {

TEST(Loadgen, ParseRange) {
  auto r = ParseRange("32:256", 1, 1000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->lo, 32);
  EXPECT_EQ(r->hi, 256);
  r = ParseRange("7", 1, 1000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->lo, 7);
  EXPECT_EQ(r->hi, 7);
  EXPECT_EQ(FormatRange(*r), "7");
  EXPECT_EQ(FormatRange({3, 9}), "3:9");
  for (const char* bad : {"", ":", "5:3", "0:4", "1:2000", "a", "1:2:3", "-1", "1:"})
    EXPECT_FALSE(ParseRange(bad, 1, 1000).ok()) << bad;
}

TEST(Loadgen, Percentiles) {
  EXPECT_EQ(Percentile({}, 0.5), 0);
  EXPECT_EQ(Percentile({5}, 0.99), 5);
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);  // unsorted input
  EXPECT_NEAR(Percentile(v, 0.5), 50.5, 1e-9);
  EXPECT_NEAR(Percentile(v, 0.0), 1, 1e-9);
  EXPECT_NEAR(Percentile(v, 1.0), 100, 1e-9);
  EXPECT_NEAR(Percentile(v, 0.99), 99.01, 1e-9);
  const Percentiles p = Summarize(v);
  EXPECT_EQ(p.n, 100);
  EXPECT_NEAR(p.mean, 50.5, 1e-9);
  EXPECT_NEAR(p.p90, 90.1, 1e-9);
  EXPECT_EQ(p.max, 100);
  EXPECT_EQ(Summarize({}).n, 0);
}

TEST(Loadgen, SynthesizedPromptsAreDeterministicAndExact) {
  EXPECT_EQ(SynthesizeText(5, 40), SynthesizeText(5, 40));
  EXPECT_NE(SynthesizeText(5, 40), SynthesizeText(6, 40));
  // A fake tokenizer: one id per byte.
  int calls = 0;
  auto tok = [&](const std::string& t) -> absl::StatusOr<std::vector<int32_t>> {
    ++calls;
    return std::vector<int32_t>(t.begin(), t.end());
  };
  for (int n : {1, 2, 17, 300}) {
    auto p = SynthesizePrompt(9, n, tok);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(static_cast<int>(p->size()), n);
    EXPECT_EQ(*p, *SynthesizePrompt(9, n, tok));
  }
  // Tokenizers that fail or give nothing are reported, not looped on.
  auto failing = [](const std::string&) -> absl::StatusOr<std::vector<int32_t>> {
    return absl::UnavailableError("down");
  };
  EXPECT_EQ(SynthesizePrompt(1, 5, failing).status().code(), absl::StatusCode::kUnavailable);
  auto empty = [](const std::string&) -> absl::StatusOr<std::vector<int32_t>> { return std::vector<int32_t>{}; };
  EXPECT_FALSE(SynthesizePrompt(1, 5, empty).ok());
  EXPECT_FALSE(SynthesizePrompt(1, 0, tok).ok());
}

TEST(Loadgen, SpecMix) {
  LoadSpec s;
  ASSERT_TRUE(ParseSpecMix("default, off,adaptive,k4,a8", &s).ok());
  ASSERT_EQ(s.spec_mix.size(), 5u);
  EXPECT_FALSE(s.spec_mix[0].k || s.spec_mix[0].adaptive || s.spec_mix[0].disable);
  EXPECT_TRUE(s.spec_mix[1].disable);
  EXPECT_TRUE(*s.spec_mix[2].adaptive);
  EXPECT_FALSE(s.spec_mix[2].k);
  EXPECT_EQ(*s.spec_mix[3].k, 4);
  EXPECT_FALSE(*s.spec_mix[3].adaptive);
  EXPECT_EQ(*s.spec_mix[4].k, 8);
  EXPECT_TRUE(*s.spec_mix[4].adaptive);
  for (const char* bad : {"k", "k-1", "x4", "a65", "on"}) EXPECT_FALSE(ParseSpecMix(bad, &s).ok()) << bad;
  EXPECT_TRUE(ParseSpecMix("", &s).ok());
  EXPECT_TRUE(s.spec_mix.empty());
}

TEST(Loadgen, BadSpecsAreErrorsNotCrashes) {
  LoadSpec ok;
  ok.coordinator = "127.0.0.1:1";
  ok.requests = 1;
  auto bad = [&](const std::function<void(LoadSpec&)>& f) {
    LoadSpec s = ok;
    f(s);
    return RunLoad(s).status().code();
  };
  EXPECT_EQ(bad([](LoadSpec& s) { s.coordinator = ""; }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](LoadSpec& s) { s.concurrency = 0; }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](LoadSpec& s) { s.requests = 0; }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](LoadSpec& s) { s.max_tokens = {0, 3}; }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](LoadSpec& s) {
              s.verify_greedy = true;
              s.sampling.temperature = 0.7f;
            }),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](LoadSpec& s) { s.cancel_fraction = 1.5; }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](LoadSpec& s) { s.stop_fraction = 0.5; }), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad([](LoadSpec& s) { s.sampling.top_p = 2; }), absl::StatusCode::kInvalidArgument);
}

TEST(Loadgen, NothingListeningFailsEveryRequestWithAStatus) {
  // Text prompts need no tokenizer round trip; every call must still end.
  LoadSpec s;
  s.coordinator = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  s.prompts = {"hello", "world"};
  s.requests = 6;
  s.concurrency = 3;
  s.request_timeout_ms = 2000;
  auto r = RunLoad(s);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->sent, 6);
  EXPECT_EQ(r->finished, 6);
  EXPECT_EQ(r->lost, 0);
  EXPECT_EQ(r->failed, 6);
  EXPECT_EQ(r->ok, 0);
  const std::string js = ReportToJson(*r, s);
  EXPECT_NE(js.find("\"failed\": 6"), std::string::npos) << js;
  EXPECT_NE(FormatReport(*r).find("6 failed"), std::string::npos);
}

TEST(Tune, ConfigFilesParseWithTheServicesConfigClass) {
  tune::KeyValues kv = {{"model", "/m/target.gguf"}, {"kv-type", "f16"}, {"max-seqs", "4"}};
  tune::SetKey(&kv, "max-seqs", "8");
  tune::SetKey(&kv, "vram-budget", "1073741824");
  EXPECT_EQ(tune::Lookup(kv, "max-seqs"), "8");
  EXPECT_EQ(tune::Lookup(kv, "nope"), "");
  const std::vector<std::string> flags = tune::ToFlags(kv);
  ASSERT_EQ(flags.size(), 4u);
  EXPECT_EQ(flags[0], "--model=/m/target.gguf");
  const std::string text = tune::ToConfigFile(kv, "line one\nline two");
  EXPECT_EQ(text.rfind("# line one\n# line two\n", 0), 0u) << text;
  // Read back with the options the workers declare: every key known, values kept.
  testing::TempDir dir;
  const std::string path = dir.File("t.conf");
  {
    std::ofstream out(path);
    out << text;
  }
  Config c("worker");
  EngineOptions::AddFlags(&c);
  ASSERT_TRUE(c.ParseArgs({"--config", path}).ok());
  EXPECT_EQ(c.GetInt("max-seqs"), 8);
  EXPECT_EQ(c.GetBytes("vram-budget"), 1073741824);
  EXPECT_EQ(c.GetString("kv-type"), "f16");
}

}  // namespace
}  // namespace specd::loadgen
