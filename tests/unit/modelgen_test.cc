// Generated models (make-model): the fast path (--fill blocks) writes valid,
// runnable models with the same type mix and the same per-tensor scales as the
// Gaussian path, deterministically by seed; derived drafts copy what they do
// not requantize.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/engine/engine.h"
#include "common/gguf/gguf.h"
#include "common/modelgen/modelgen.h"
#include "common/quant/block_random.h"
#include "common/quant/quant.h"
#include "common/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/support/test_models.h"
#include "tests/support/test_util.h"

namespace specd {
namespace {

using testing::TempDir;

// qwen3 with rows of 256 (every block format applies) and q_dim != d_model.
GenOptions Wide(const std::string& type, WeightFill fill, uint64_t seed = 5) {
  GenOptions g;
  g.shape = *PresetShape("tiny-qwen3");
  g.shape.n_layers = 3;
  g.shape.d_model = 256;
  g.shape.ffn_dim = 512;
  g.shape.head_dim = 128;
  g.weight_type = type;
  g.fill = fill;
  g.seed = seed;
  return g;
}

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct Moments {
  double mean = 0, sd = 0;
  bool finite = true;
};
Moments TensorMoments(const GgufTensorInfo& t) {
  const int64_t ne0 = t.ne[0], rows = t.rows();
  std::vector<float> row(static_cast<size_t>(ne0));
  double s = 0, sq = 0;
  Moments m;
  for (int64_t r = 0; r < rows; ++r) {
    DequantizeRow(t.type, t.data + r * RowBytes(t.type, ne0), row.data(), ne0);
    for (float x : row) {
      m.finite &= std::isfinite(x);
      s += x;
      sq += double{x} * x;
    }
  }
  const double n = static_cast<double>(ne0 * rows);
  m.mean = s / n;
  m.sd = std::sqrt(std::max(0.0, sq / n - m.mean * m.mean));
  return m;
}

TEST(ModelGen, SameSeedSameBytes) {
  TempDir dir;
  for (WeightFill fill : {WeightFill::kBlocks, WeightFill::kGaussian}) {
    const std::string a = dir.File("a.gguf"), b = dir.File("b.gguf"), c = dir.File("c.gguf");
    ASSERT_TRUE(GenerateModel(Wide("Q4_K_M", fill), a).ok());
    ASSERT_TRUE(GenerateModel(Wide("Q4_K_M", fill), b).ok());
    ASSERT_TRUE(GenerateModel(Wide("Q4_K_M", fill, 6), c).ok());
    const auto ba = ReadAll(a);
    EXPECT_GT(ba.size(), 100000u);
    EXPECT_EQ(ba, ReadAll(b)) << WeightFillName(fill);
    EXPECT_NE(ba, ReadAll(c)) << WeightFillName(fill) << ": the seed must change the weights";
  }
}

// The fast path keeps what matters of a model: the mix's type per tensor, each
// matrix's scale (deviation within 20% of the Gaussian path's, mean ~0), every
// value finite, the tokenizer; and it records how it was made.
TEST(ModelGen, BlocksKeepTypesAndScalesOfTheGaussianPath) {
  TempDir dir;
  for (const char* type : {"Q4_K_S", "Q4_K_M", "Q8_0", "Q6_K", "F16"}) {
    const std::string gp = dir.File("g.gguf"), bp = dir.File("b.gguf");
    ASSERT_TRUE(GenerateModel(Wide(type, WeightFill::kGaussian), gp).ok());
    ASSERT_TRUE(GenerateModel(Wide(type, WeightFill::kBlocks), bp).ok());
    auto g = GgufFile::Open(gp);
    auto b = GgufFile::Open(bp);
    ASSERT_TRUE(g.ok() && b.ok());
    EXPECT_EQ(*(*b)->GetString("specd.generator.fill"), "blocks");
    EXPECT_EQ(*(*g)->GetString("specd.generator.fill"), "gaussian");
    EXPECT_TRUE(Tokenizer::FromGguf(**b).ok());
    ASSERT_EQ((*g)->tensors().size(), (*b)->tensors().size());
    for (size_t i = 0; i < (*g)->tensors().size(); ++i) {
      const GgufTensorInfo& tg = (*g)->tensors()[i];
      const GgufTensorInfo& tb = (*b)->tensors()[i];
      ASSERT_EQ(tg.name, tb.name);
      EXPECT_EQ(tg.type, tb.type) << type << " " << tg.name;
      EXPECT_EQ(tg.ne, tb.ne);
      const Moments mg = TensorMoments(tg), mb = TensorMoments(tb);
      EXPECT_TRUE(mb.finite) << type << " " << tb.name;
      if (tg.ne.size() < 2) {
        EXPECT_EQ(mg.mean, mb.mean) << "vectors are the same in both paths: " << tb.name;
        continue;
      }
      EXPECT_NEAR(mb.sd / mg.sd, 1.0, 0.2) << type << " " << tb.name << " sd " << mb.sd << " vs " << mg.sd;
      EXPECT_LT(std::fabs(mb.mean), 0.25 * mb.sd) << type << " " << tb.name;
    }
  }
}

TEST(ModelGen, BlocksModelRunsWithFiniteLogits) {
  TempDir dir;
  const std::string path = dir.File("m.gguf");
  ASSERT_TRUE(GenerateModel(Wide("Q4_K_S", WeightFill::kBlocks), path).ok());
  auto e = testing::MakeTestEngine(path);
  ASSERT_NE(e, nullptr);
  ASSERT_TRUE(e->NewSequence(1).ok());
  std::vector<int32_t> toks;
  for (int i = 0; i < 24; ++i) toks.push_back((i * 37 + 11) % 512);
  std::vector<float> out;
  ASSERT_TRUE(e->Run({{1, toks, static_cast<int>(toks.size())}}, &out).ok());
  ASSERT_EQ(out.size(), toks.size() * 512);
  double sq = 0;
  for (float x : out) {
    ASSERT_TRUE(std::isfinite(x));
    sq += double{x} * x;
  }
  const double rms = std::sqrt(sq / static_cast<double>(out.size()));
  EXPECT_GT(rms, 0.1) << "logits must not collapse";
  EXPECT_LT(rms, 100.0);
}

// A derived draft copies every tensor whose type stays, byte for byte, and
// requantizes the others (values close to the target's).
TEST(ModelGen, DerivedDraftCopiesWhatItDoesNotRequantize) {
  TempDir dir;
  const std::string target = dir.File("t.gguf"), draft = dir.File("d.gguf");
  ASSERT_TRUE(GenerateModel(Wide("Q4_K_S", WeightFill::kBlocks), target).ok());
  DeriveOptions d;
  d.layers = 2;
  d.weight_type = "Q4_K_M";
  ASSERT_TRUE(DeriveDraft(target, d, draft).ok());
  auto t = GgufFile::Open(target);
  auto f = GgufFile::Open(draft);
  ASSERT_TRUE(t.ok() && f.ok());
  EXPECT_EQ(*(*f)->GetUInt("qwen3.block_count"), 2u);
  int copied = 0, requantized = 0;
  for (const auto& dt : (*f)->tensors()) {
    const GgufTensorInfo* tt = (*t)->FindTensor(dt.name);
    ASSERT_NE(tt, nullptr) << dt.name;
    auto want = MixTypeFor("Q4_K_M", dt.name, dt.name.rfind("blk.", 0) == 0 ? std::atoi(dt.name.c_str() + 4) : -1, 2);
    ASSERT_TRUE(want.ok());
    if (dt.ne.size() >= 2) {
      EXPECT_EQ(dt.type, *want) << dt.name;
    }
    if (dt.type == tt->type) {
      ++copied;
      EXPECT_EQ(0, std::memcmp(dt.data, tt->data, dt.nbytes)) << dt.name << " must be a copy";
      continue;
    }
    ++requantized;
    const Moments md = TensorMoments(dt), mt = TensorMoments(*tt);
    EXPECT_NEAR(md.sd / mt.sd, 1.0, 0.05) << dt.name;
  }
  EXPECT_GT(copied, 5);
  EXPECT_GT(requantized, 0);
}

TEST(ModelGen, SuccessorMapIsAPermutation) {
  for (const int64_t v : {1, 2, 7, 1000, 151936}) {
    const SuccessorMap m(7, v);
    std::vector<bool> seen(static_cast<size_t>(v));
    for (int64_t x = 0; x < v; ++x) {
      const int64_t y = m.Next(x);
      ASSERT_GE(y, 0);
      ASSERT_LT(y, v);
      ASSERT_FALSE(seen[static_cast<size_t>(y)]) << "v=" << v << " x=" << x;
      seen[static_cast<size_t>(y)] = true;
      ASSERT_EQ(m.Prev(y), x);
    }
  }
  EXPECT_NE(SuccessorMap(1, 1000).Next(5), SuccessorMap(2, 1000).Next(5));
}

// Greedy next tokens of `path` at each position of `tokens`.
std::vector<int32_t> ArgmaxAt(const std::string& path, const std::vector<int32_t>& tokens) {
  auto e = testing::MakeTestEngine(path);
  EXPECT_NE(e, nullptr);
  if (!e || !e->NewSequence(1).ok()) return {};
  std::vector<float> out;
  if (!e->Run({{1, tokens, static_cast<int>(tokens.size())}}, &out).ok()) return {};
  const size_t V = static_cast<size_t>(e->vocab_size());
  std::vector<int32_t> best;
  for (size_t r = 0; r < tokens.size(); ++r)
    best.push_back(static_cast<int32_t>(std::max_element(out.begin() + r * V, out.begin() + (r + 1) * V) -
                                        (out.begin() + r * V)));
  return best;
}

// Two independent models of different shapes (a 4-layer d=256 target, a
// 2-layer d=64 draft) agree on the next token when made with the same
// successor structure, and almost never without it.
TEST(ModelGen, SuccessorStructureMakesIndependentShapesAgree) {
  TempDir dir;
  constexpr int kVocab = 2048;
  std::vector<int32_t> tokens;
  for (int i = 0; i < 64; ++i) tokens.push_back((i * 389 + 11) % kVocab);
  const SuccessorMap succ(1, kVocab);
  for (const float gain : {0.0f, 20.0f}) {
    auto make = [&](const char* preset, uint64_t seed, const std::string& path) {
      GenOptions g;
      g.shape = *PresetShape(preset);
      g.shape.vocab_size = kVocab;
      g.weight_type = "Q8_0";
      g.seed = seed;
      g.successor_gain = gain;
      ASSERT_TRUE(GenerateModel(g, path).ok());
    };
    const std::string t = dir.File("t.gguf"), d = dir.File("d.gguf");
    make("small", 3, t);
    make("tiny", 4, d);
    if (gain > 0) {
      auto f = GgufFile::Open(t);
      ASSERT_TRUE(f.ok());
      EXPECT_EQ(*(*f)->GetUInt("specd.generator.successor_seed"), 1u);
      EXPECT_NE((*f)->FindTensor("output.weight"), nullptr);
    }
    const std::vector<int32_t> at = ArgmaxAt(t, tokens), ad = ArgmaxAt(d, tokens);
    ASSERT_EQ(at.size(), tokens.size());
    ASSERT_EQ(ad.size(), tokens.size());
    int agree = 0, follows = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
      agree += at[i] == ad[i];
      follows += at[i] == succ.Next(tokens[i]);
    }
    if (gain == 0) {
      EXPECT_LT(agree, 6) << "independent random models should not agree";
    } else {
      EXPECT_GT(agree, 40) << "of 64 positions";
      EXPECT_GT(follows, 48) << "the target should mostly follow the successor map";
    }
  }
}

// Benchmarks of named shapes synthesize weights in the backend with the same
// algorithm (block_random.h): on the CPU they run with finite, non-collapsed
// logits, and the scale rule is the documented one.
TEST(ModelGen, CpuSynthesizedWeightsRun) {
  const SyntheticWeight m = SyntheticWeightFor("blk.0.ffn_up.weight", 256, 512);
  EXPECT_FLOAT_EQ(m.sigma, 1.0f / 16);
  EXPECT_EQ(m.mean, 0.0f);
  EXPECT_EQ(SyntheticWeightFor("token_embd.weight", 256, 512).sigma, 1.0f);
  EXPECT_EQ(SyntheticWeightFor("blk.0.attn_norm.weight", 256, 1).mean, 1.0f);
  EXPECT_EQ(SyntheticWeightFor("blk.0.attn_q.bias", 256, 1).mean, 0.0f);
  EXPECT_NE(m.seed, SyntheticWeightFor("blk.1.ffn_up.weight", 256, 512).seed);
  const GenOptions g = Wide("Q4_K_M", WeightFill::kBlocks);
  EngineOptions o;
  o.backend.threads = 2;
  o.max_seqs = 1;
  o.max_seq_len = 64;
  o.max_batch_tokens = 16;
  o.max_out_rows = 16;
  auto e = Engine::CreateSynthetic(
      ToModelConfig(g.shape),
      [&](const std::string& name, int layer) { return *MixTypeFor("Q4_K_M", name, layer, g.shape.n_layers); }, o);
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE((*e)->NewSequence(0).ok());
  std::vector<float> out;
  ASSERT_TRUE((*e)->Run({{0, {1, 2, 3, 4, 5, 6, 7, 8}, 8}}, &out).ok());
  double sq = 0;
  for (float x : out) {
    ASSERT_TRUE(std::isfinite(x));
    sq += double{x} * x;
  }
  const double rms = std::sqrt(sq / static_cast<double>(out.size()));
  EXPECT_GT(rms, 0.1);
  EXPECT_LT(rms, 1000.0);
}

}  // namespace
}  // namespace specd
