#include "tests/support/test_models.h"

#include "common/modelgen/modelgen.h"
#include "common/util/status.h"
#include "gtest/gtest.h"

namespace specd::testing {

absl::Status TestModels::Make() {
  GenOptions g;
  SPECD_ASSIGN_OR_RETURN(g.shape, PresetShape("tiny"));
  g.seed = 1;
  g.name = "test-target";
  target = dir.File("target.gguf");
  SPECD_RETURN_IF_ERROR(GenerateModel(g, target));
  DeriveOptions d;
  d.layers = 1;
  d.name = "test-draft";
  draft = dir.File("draft.gguf");
  SPECD_RETURN_IF_ERROR(DeriveDraft(target, d, draft));
  g.seed = 7;
  g.name = "test-other-draft";
  other = dir.File("other.gguf");
  SPECD_RETURN_IF_ERROR(GenerateModel(g, other));
  g.shape.vocab_size = 300;
  g.name = "test-foreign-vocab";
  foreign = dir.File("foreign.gguf");
  return GenerateModel(g, foreign);
}

const TestModels& SharedTestModels() {
  static TestModels models;
  static const absl::Status made = models.Make();
  EXPECT_TRUE(made.ok()) << "generating the test models: " << made;
  return models;
}

std::unique_ptr<Engine> MakeTestEngine(const std::string& path, int max_seqs) {
  EngineOptions o;
  o.model_path = path;
  o.backend.threads = 1;
  o.max_seqs = max_seqs;
  o.max_seq_len = 512;
  o.max_batch_tokens = 64;
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

SpecRequest FixedRequest(int32_t seq, const std::vector<int32_t>& prompt, int max_tokens, int k) {
  SpecRequest req;
  req.seq = seq;
  req.prompt = prompt;
  req.max_tokens = max_tokens;
  req.ignore_eos = true;
  req.k = k;
  return req;
}

}  // namespace specd::testing
