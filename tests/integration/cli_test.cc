// The `specd` CLI as an operator runs it: make-model writes files that
// inspect reads, and generate's greedy tokens equal the float64 reference's.
#include <regex>
#include <sstream>

#include "common/gguf/gguf.h"
#include "gtest/gtest.h"
#include "tests/support/test_util.h"

namespace specd {
namespace {

using testing::RunSpecd;
using testing::ShellQuote;

TEST(CliTest, InspectReadsEveryFileMakeModelWrites) {
  testing::TempDir dir;
  struct Case {
    std::string args;
    std::string file;
  };
  const std::vector<Case> cases = {
      {"--preset tiny --type F32", "a.gguf"},
      {"--preset tiny-qwen2 --type Q8_0 --vocab llama", "b.gguf"},
      {"--preset tiny-qwen3 --type F16", "c.gguf"},
      {"--preset tiny --d-model 256 --ffn 512 --type Q4_K_M", "d.gguf"},
      {"--preset tiny --d-model 256 --ffn 512 --type Q6_K --vocab-size 300", "e.gguf"},
  };
  for (const auto& c : cases) {
    std::string out;
    ASSERT_EQ(RunSpecd("make-model " + c.args + " --out " + ShellQuote(dir.File(c.file)), &out), 0) << out;
    ASSERT_EQ(RunSpecd("inspect " + ShellQuote(dir.File(c.file)) + " --ctx 256 --batch 2", &out), 0) << out;
    EXPECT_NE(out.find("parameters:"), std::string::npos) << out;
    EXPECT_NE(out.find("vocab digest:"), std::string::npos) << out;
    EXPECT_NE(out.find("kv q8_0"), std::string::npos) << out;
    EXPECT_EQ(out.find("not runnable"), std::string::npos) << out;
  }
  // A pair, and a draft derived from an existing target.
  std::string out;
  ASSERT_EQ(RunSpecd("make-model --preset tiny --pair --out " + ShellQuote(dir.File("pair")), &out), 0) << out;
  ASSERT_EQ(RunSpecd("make-model --derive-from " + ShellQuote(dir.File("pair/target.gguf")) +
                    " --draft-layers 1 --draft-type Q8_0 --out " + ShellQuote(dir.File("d2.gguf")),
                &out),
            0)
      << out;
  for (const char* f : {"pair/target.gguf", "pair/draft.gguf", "d2.gguf"}) {
    ASSERT_EQ(RunSpecd("inspect " + ShellQuote(dir.File(f)), &out), 0) << f << "\n" << out;
  }
  std::string a, b;
  RunSpecd("inspect " + ShellQuote(dir.File("pair/target.gguf")) + " --tensors=false", &a);
  RunSpecd("inspect " + ShellQuote(dir.File("d2.gguf")) + " --tensors=false", &b);
  std::smatch ma, mb;
  const std::regex digest("vocab digest: ([0-9a-f]+)");
  ASSERT_TRUE(std::regex_search(a, ma, digest));
  ASSERT_TRUE(std::regex_search(b, mb, digest));
  EXPECT_EQ(ma[1], mb[1]) << "a derived draft shares the target's vocabulary";
}

TEST(CliTest, BadInputGivesClearErrors) {
  testing::TempDir dir;
  std::string out;
  EXPECT_NE(RunSpecd("inspect " + ShellQuote(dir.File("missing.gguf")), &out), 0);
  EXPECT_NE(out.find("missing.gguf"), std::string::npos) << out;
  EXPECT_NE(RunSpecd("make-model --preset nope --out x.gguf", &out), 0);
  EXPECT_NE(out.find("unknown model preset 'nope'"), std::string::npos) << out;
  EXPECT_NE(RunSpecd("generate --modle x", &out), 0);
  EXPECT_NE(out.find("unknown flag '--modle'"), std::string::npos) << out;
  EXPECT_NE(RunSpecd("frobnicate", &out), 0);
  EXPECT_NE(out.find("unknown command"), std::string::npos) << out;
  ASSERT_EQ(RunSpecd("make-model --preset tiny --out " + ShellQuote(dir.File("t.gguf")), &out), 0);
  EXPECT_NE(RunSpecd("generate --model " + ShellQuote(dir.File("t.gguf")) + " --prompt ''", &out), 0);
  EXPECT_NE(out.find("--prompt is required"), std::string::npos) << out;
}

std::vector<int32_t> ParseIds(const std::string& s, const std::string& prefix) {
  std::vector<int32_t> ids;
  const auto p = s.find(prefix);
  if (p == std::string::npos) return ids;
  std::istringstream in(s.substr(p + prefix.size(), s.find('\n', p) - p - prefix.size()));
  std::string tok;
  while (in >> tok) ids.push_back(std::stoi(tok));
  return ids;
}

TEST(CliTest, GenerateMatchesFloat64ReferenceGreedy) {
  SPECD_REQUIRE_PYREF("gguf, numpy");
  testing::TempDir dir;
  const std::string m = dir.File("m.gguf");
  std::string out;
  ASSERT_EQ(RunSpecd("make-model --preset tiny --type Q8_0 --seed 3 --out " + ShellQuote(m), &out), 0) << out;
  // Token ids in, so both sides start from the same prompt.
  ASSERT_EQ(RunSpecd("generate --model " + ShellQuote(m) + " --prompt 'The cat sat on the mat' --max-tokens 12 "
                "--ignore-eos --print-ids --kv-type f32",
                &out),
            0)
      << out;
  const auto got = ParseIds(out, "ids:");
  ASSERT_EQ(got.size(), 12u) << out;
  // The prompt's ids, from the same tokenizer, via the reference's input.
  auto f = GgufFile::Open(m);
  ASSERT_TRUE(f.ok());
  std::string prompt_ids;
  ASSERT_EQ(RunSpecd("generate --model " + ShellQuote(m) + " --prompt 'The cat sat on the mat' --max-tokens 1 "
                "--print-prompt-ids",
                &prompt_ids),
            0)
      << prompt_ids;
  const auto prompt = ParseIds(prompt_ids, "prompt ids:");
  ASSERT_FALSE(prompt.empty()) << prompt_ids;
  std::string csv;
  for (size_t i = 0; i < prompt.size(); ++i) csv += (i ? "," : "") + std::to_string(prompt[i]);
  std::string ref;
  ASSERT_EQ(testing::RunCommand(ShellQuote(testing::PythonPath()) + " " +
                                    ShellQuote(testing::SourcePath("tests/python/ref_model.py")) + " " + ShellQuote(m) +
                                    " " + csv + " --greedy 12",
                                &ref),
            0);
  std::vector<int32_t> want;
  std::istringstream in(ref);
  std::string tok;
  while (std::getline(in, tok, ',')) want.push_back(std::stoi(tok));
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace specd
