// The GGUF files specd writes are the files llama.cpp expects: every key has
// the type the GGUF spec and llama.cpp's loader read it with (checked by
// tests/python/gguf_keys.py with the PyPI `gguf` package, a table of expected
// types and values independent of specd's code), the tensors are the
// architecture's, and older specd files (general.file_type as a string) still
// read, with a clear account of what they are. llama.cpp itself loads them
// unpatched and computes what specd computes (logits, greedy tokens) through
// the llama_cpp binding of the test venv (llama.cpp 0.3.36, CPU); when
// SPECD_LLAMA_CPP_BIN names a llama.cpp build's bin directory, its programs
// run on our files too.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/engine/engine.h"
#include "common/gguf/file_type.h"
#include "common/gguf/gguf.h"
#include "common/modelgen/modelgen.h"
#include "gtest/gtest.h"
#include "tests/support/test_util.h"

namespace specd {
namespace {

using testing::RunSpecd;
using testing::ShellQuote;

// gguf_keys.py FILE EXPECT_JSON; its report in *out.
int CheckKeys(const std::string& file, const std::string& expect_json, std::string* out) {
  return testing::RunCommand(ShellQuote(testing::PythonPath()) + " " +
                                 ShellQuote(testing::SourcePath("tests/python/gguf_keys.py")) + " " +
                                 ShellQuote(file) + " " + ShellQuote(expect_json) + " 2>&1",
                             out);
}

struct KeyCase {
  std::string args;       // make-model arguments (without --out)
  std::string file;       // written file, relative to the temp dir
  std::string expect;     // gguf_keys.py expectations
  std::string draft;      // with --pair: the draft's expectations
};

// Shapes: tiny = llama 2 layers d=64 heads 4/2 ffn 128 vocab 512;
// "wide" = rows of 256, so every block format applies.
const char kWide[] = " --d-model 256 --ffn 512";

std::vector<KeyCase> KeyCases() {
  const std::string tiny = R"("block_count": 2, "head_count": 4, "head_count_kv": 2, "context_length": 2048, )"
                           R"("vocab_size": 512, )";
  auto wide = [&](const std::string& arch, const std::string& ftype, const std::string& extra = "") {
    return "{\"arch\": \"" + arch + "\", \"file_type\": \"" + ftype + "\", " + tiny +
           R"("embedding_length": 256, "feed_forward_length": 512)" + extra + "}";
  };
  std::vector<KeyCase> c = {
      {"--preset tiny --type F32", "f32.gguf",
       "{\"arch\": \"llama\", \"file_type\": \"ALL_F32\", " + tiny +
           R"("embedding_length": 64, "feed_forward_length": 128, "tokenizer": "gpt2", "tied_output": false})",
       ""},
      {"--preset tiny-qwen2 --type Q8_0 --vocab llama", "q8.gguf",
       "{\"arch\": \"qwen2\", \"file_type\": \"MOSTLY_Q8_0\", " + tiny +
           R"("embedding_length": 64, "tokenizer": "llama", "tensor_types": {"blk.0.attn_q.weight": "Q8_0"}})",
       ""},
      {"--preset tiny-qwen3 --type F16", "f16.gguf",
       "{\"arch\": \"qwen3\", \"file_type\": \"MOSTLY_F16\", " + tiny + R"("key_length": 32, "tied_output": true})",
       ""},
      {"--preset tiny --type BF16", "bf16.gguf", R"({"arch": "llama", "file_type": "MOSTLY_BF16"})", ""},
      {std::string("--preset tiny --type Q4_K_M --pair") + kWide, "pm",
       wide("llama", "MOSTLY_Q4_K_M",
            R"(, "tensor_types": {"output.weight": "Q6_K", "blk.0.attn_q.weight": "Q4_K"})"),
       R"({"arch": "llama", "file_type": "MOSTLY_Q4_K_M", "block_count": 1})"},
      {std::string("--preset tiny-qwen3 --type Q4_K_S --fill blocks --pair --draft-layers 1 --draft-type Q4_K_M") +
           kWide,
       "ps",
       wide("qwen3", "MOSTLY_Q4_K_S",
            R"(, "key_length": 32, "tied_output": true, "tensor_types": {"blk.0.ffn_down.weight": "Q4_K"})"),
       R"({"arch": "qwen3", "file_type": "MOSTLY_Q4_K_M", "block_count": 1, "tied_output": true})"},
      {std::string("--preset tiny-qwen2 --type Q5_K_M") + kWide, "q5km.gguf", wide("qwen2", "MOSTLY_Q5_K_M"), ""},
  };
  // Single types: the ftype llama.cpp's loader infers for a file of each.
  const std::vector<std::pair<std::string, std::string>> singles = {
      {"Q4_0", "MOSTLY_Q4_0"}, {"Q4_1", "MOSTLY_Q4_1"}, {"Q5_0", "MOSTLY_Q5_0"}, {"Q5_1", "MOSTLY_Q5_1"},
      {"Q2_K", "MOSTLY_Q2_K"}, {"Q3_K", "MOSTLY_Q3_K_M"}, {"Q4_K", "MOSTLY_Q4_K_M"}, {"Q5_K", "MOSTLY_Q5_K_M"},
      {"Q6_K", "MOSTLY_Q6_K"}};
  for (const auto& [type, ftype] : singles) {
    c.push_back({"--preset tiny --type " + type + kWide, type + ".gguf",
                 wide("llama", ftype, R"(, "tensor_types": {"blk.1.ffn_up.weight": ")" + type + "\"}"), ""});
  }
  return c;
}

TEST(GgufInterop, EveryKeyHasTheSpecType) {
  SPECD_REQUIRE_PYREF("gguf");
  testing::TempDir dir;
  for (const auto& c : KeyCases()) {
    std::string out;
    ASSERT_EQ(RunSpecd("make-model " + c.args + " --out " + ShellQuote(dir.File(c.file)), &out), 0) << out;
    const bool pair = !c.draft.empty();
    const std::string target = pair ? dir.File(c.file + "/target.gguf") : dir.File(c.file);
    EXPECT_EQ(CheckKeys(target, c.expect, &out), 0) << c.args << "\n" << out;
    if (pair) {
      EXPECT_EQ(CheckKeys(dir.File(c.file + "/draft.gguf"), c.draft, &out), 0) << c.args << "\n" << out;
    }
  }
  // A draft derived from an existing target with another type.
  std::string out;
  ASSERT_EQ(RunSpecd("make-model --derive-from " + ShellQuote(dir.File("pm/target.gguf")) +
                         " --draft-layers 1 --draft-type Q8_0 --out " + ShellQuote(dir.File("d8.gguf")),
                     &out),
            0)
      << out;
  EXPECT_EQ(CheckKeys(dir.File("d8.gguf"),
                      R"({"arch": "llama", "file_type": "MOSTLY_Q8_0", "block_count": 1,)"
                      R"( "tensor_types": {"output.weight": "Q8_0"}})",
                      &out),
            0)
      << out;
}

// The checker is no stub: the old string file_type, an unknown key and a
// wrongly typed hyperparameter are each reported.
TEST(GgufInterop, CheckerRejectsWhatLlamaCppRefuses) {
  SPECD_REQUIRE_PYREF("gguf");
  testing::TempDir dir;
  GenOptions g;
  g.shape = *PresetShape("tiny");
  const std::string good = dir.File("good.gguf");
  ASSERT_TRUE(GenerateModel(g, good).ok());
  auto f = GgufFile::Open(good);
  ASSERT_TRUE(f.ok()) << f.status();
  auto rewrite = [&](const std::string& path, const std::string& key, const GgufValue& v) {
    GgufWriter w;
    for (const auto& [k, val] : (*f)->metadata()) w.Set(k, val);
    w.Set(key, v);
    for (const auto& t : (*f)->tensors()) ASSERT_TRUE(w.AddTensor(t.name, t.type, t.ne, t.data, t.nbytes).ok());
    ASSERT_TRUE(w.WriteFile(path).ok());
  };
  rewrite(dir.File("legacy.gguf"), "general.file_type", GgufValue::Str("F32"));
  rewrite(dir.File("unknown.gguf"), "llama.frobnication", GgufValue::U32(3));
  rewrite(dir.File("i32.gguf"), "llama.block_count", GgufValue::I32(2));
  std::string out;
  const std::string want = R"({"arch": "llama"})";
  EXPECT_EQ(CheckKeys(good, want, &out), 0) << out;
  EXPECT_NE(CheckKeys(dir.File("legacy.gguf"), want, &out), 0);
  EXPECT_NE(out.find("general.file_type: type STRING, expected UINT32"), std::string::npos) << out;
  EXPECT_NE(CheckKeys(dir.File("unknown.gguf"), want, &out), 0);
  EXPECT_NE(out.find("unknown key llama.frobnication"), std::string::npos) << out;
  EXPECT_NE(CheckKeys(dir.File("i32.gguf"), want, &out), 0);
  EXPECT_NE(out.find("llama.block_count: type INT32, expected UINT32"), std::string::npos) << out;
}

// Files from before general.file_type was a u32 still read, say so, and a
// derived file is written the new way.
TEST(GgufInterop, LegacyStringFileTypeStillReads) {
  testing::TempDir dir;
  GenOptions g;
  g.shape = *PresetShape("tiny");
  g.weight_type = "Q8_0";
  const std::string path = dir.File("m.gguf");
  ASSERT_TRUE(GenerateModel(g, path).ok());
  {
    auto f = GgufFile::Open(path);
    ASSERT_TRUE(f.ok());
    auto ft = FileTypeOf(**f);
    ASSERT_TRUE(ft.ok()) << ft.status();
    EXPECT_EQ(ft->ftype, 7u);
    EXPECT_EQ(ft->name, "Q8_0");
    EXPECT_FALSE(ft->legacy);
    GgufWriter w;
    for (const auto& [k, v] : (*f)->metadata()) w.Set(k, v);
    w.Set("general.file_type", GgufValue::Str("Q4_K_M"));
    for (const auto& t : (*f)->tensors()) ASSERT_TRUE(w.AddTensor(t.name, t.type, t.ne, t.data, t.nbytes).ok());
    ASSERT_TRUE(w.WriteFile(dir.File("legacy.gguf")).ok());
    w.Set("general.file_type", GgufValue::Str("Q9_X"));
    ASSERT_TRUE(w.WriteFile(dir.File("bad.gguf")).ok());
    w.Set("general.file_type", GgufValue::U32(5));  // removed from llama.cpp (Q4_2)
    ASSERT_TRUE(w.WriteFile(dir.File("removed.gguf")).ok());
    w.Set("general.file_type", GgufValue::F32(15));
    ASSERT_TRUE(w.WriteFile(dir.File("float.gguf")).ok());
  }
  auto legacy = GgufFile::Open(dir.File("legacy.gguf"));
  ASSERT_TRUE(legacy.ok());
  auto ft = FileTypeOf(**legacy);
  ASSERT_TRUE(ft.ok()) << ft.status();
  EXPECT_TRUE(ft->legacy);
  EXPECT_EQ(ft->ftype, 15u);
  EXPECT_EQ(ft->name, "Q4_K_M");
  for (const char* bad : {"bad.gguf", "removed.gguf", "float.gguf"}) {
    auto f = GgufFile::Open(dir.File(bad));
    ASSERT_TRUE(f.ok());
    const auto st = FileTypeOf(**f).status();
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << st;
    EXPECT_NE(st.message().find("general.file_type"), std::string::npos) << st;
  }
  // The model itself never depended on the key: it still runs.
  std::string out;
  ASSERT_EQ(RunSpecd("inspect " + ShellQuote(dir.File("legacy.gguf")) + " --tensors=false", &out), 0) << out;
  EXPECT_NE(out.find("file type: Q4_K_M (llama_ftype 15); stored as a string by an older specd"), std::string::npos)
      << out;
  EXPECT_EQ(out.find("not runnable"), std::string::npos) << out;
  // Deriving from it writes llama.cpp's u32.
  DeriveOptions d;
  d.layers = 1;
  ASSERT_TRUE(DeriveDraft(dir.File("legacy.gguf"), d, dir.File("derived.gguf")).ok());
  auto derived = GgufFile::Open(dir.File("derived.gguf"));
  ASSERT_TRUE(derived.ok());
  const GgufValue* v = (*derived)->Find("general.file_type");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->type, GgufValueType::UINT32);
  EXPECT_EQ(*(*derived)->GetUInt("general.file_type"), 15u);
}

// ---------------------------------------------------------------------------
// llama.cpp on our files.

struct PeerCase {
  std::string name;
  GenOptions gen;
  int derive_layers = 0;  // > 0: the file is a draft derived from gen's model
  std::string derive_type;
};

GenOptions Gen(const std::string& preset, const std::string& type, bool wide, WeightFill fill = WeightFill::kGaussian) {
  GenOptions g;
  g.shape = *PresetShape(preset);
  if (wide) {  // rows of 256: every block format applies
    g.shape.d_model = 256;
    g.shape.ffn_dim = 512;
  }
  g.weight_type = type;
  g.fill = fill;
  g.seed = 11;
  return g;
}

std::vector<PeerCase> PeerCases() {
  return {
      {"llama-F32", Gen("tiny", "F32", false)},
      {"qwen2-Q8_0", Gen("tiny-qwen2", "Q8_0", false)},
      {"qwen3-F16", Gen("tiny-qwen3", "F16", false)},
      {"llama-Q4_K_M", Gen("tiny", "Q4_K_M", true)},
      {"qwen2-Q6_K", Gen("tiny-qwen2", "Q6_K", true)},
      {"llama-Q5_1", Gen("tiny", "Q5_1", true)},
      {"qwen3-Q4_K_S-blocks", Gen("tiny-qwen3", "Q4_K_S", true, WeightFill::kBlocks)},
      {"qwen3-Q4_K_S-blocks-draft-Q4_K_M", Gen("tiny-qwen3", "Q4_K_S", true, WeightFill::kBlocks), 1, "Q4_K_M"},
  };
}

absl::StatusOr<std::string> MakePeerFile(const PeerCase& c, const testing::TempDir& dir) {
  const std::string base = dir.File(c.name + (c.derive_layers ? "-target" : "") + ".gguf");
  SPECD_RETURN_IF_ERROR(GenerateModel(c.gen, base));
  if (!c.derive_layers) return base;
  DeriveOptions d;
  d.layers = c.derive_layers;
  d.weight_type = c.derive_type;
  const std::string path = dir.File(c.name + ".gguf");
  SPECD_RETURN_IF_ERROR(DeriveDraft(base, d, path));
  return path;
}

// specd's logits for every position of `toks` and the `greedy` tokens its
// greedy decoding appends (argmax, first of equals, as numpy's).
std::vector<float> SpecdLogits(const std::string& path, const std::vector<int32_t>& toks, int greedy,
                               std::vector<int32_t>* appended) {
  EngineOptions o;
  o.model_path = path;
  o.backend.threads = 2;
  o.max_seqs = 1;
  o.max_seq_len = 256;
  o.max_out_rows = static_cast<int>(toks.size());
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return {};
  EXPECT_TRUE((*e)->NewSequence(0).ok());
  std::vector<float> all, out;
  auto st = (*e)->Run({{0, toks, static_cast<int>(toks.size())}}, &all);
  EXPECT_TRUE(st.ok()) << st;
  const int V = (*e)->vocab_size();
  out.assign(all.end() - V, all.end());
  for (int i = 0; i < greedy && st.ok(); ++i) {
    const int32_t t = static_cast<int32_t>(std::max_element(out.begin(), out.end()) - out.begin());
    appended->push_back(t);
    out.clear();  // Run appends
    st = (*e)->Run({{0, {t}, 1}}, &out);
    EXPECT_TRUE(st.ok()) << st;
  }
  return all;
}

// llama.cpp (the llama_cpp binding of the test venv, CPU, unpatched) loads
// every kind of file make-model writes and its logits agree with specd's at
// every position. Both quantize activations to 8 bits for quantized weights
// (llama.cpp: q8_0/q8_1/q8_K; specd: its own int8 rows), and both keep the KV
// cache in f16, so they differ by a few 1e-3 relative: measured max row error
// 5e-5 (F32), 2.5e-4 (F16), 4.7e-3..7.9e-3 (Q8_0, Q5_1, Q4_K_M, Q6_K, blocks),
// top-1 agreement 23-24 of 24. Bounds: 0.03 and 22 of 24. A misread
// hyperparameter, tensor or tokenizer gives errors of order 1. The same file
// with the old string file_type is refused (what this interop fixed).
TEST(GgufInterop, LlamaCppLoadsOurFilesAndAgrees) {
  SPECD_REQUIRE_PYREF("gguf, numpy, llama_cpp");
  constexpr int kGreedy = 16;
  testing::TempDir dir;
  std::vector<int32_t> toks;
  for (int i = 0; i < 24; ++i) toks.push_back((i * 37 + 11) % 512);
  for (const auto& c : PeerCases()) {
    auto path = MakePeerFile(c, dir);
    ASSERT_TRUE(path.ok()) << c.name << ": " << path.status();
    const auto ref = testing::RunPythonReference("tests/python/llamacpp_ref.py", *path, toks, dir);
    std::vector<int32_t> ours;
    const auto got = SpecdLogits(*path, toks, kGreedy, &ours);
    const int V = 512;
    ASSERT_EQ(ref.size(), toks.size() * V) << c.name << ": llama.cpp did not load or run the file";
    ASSERT_EQ(got.size(), ref.size()) << c.name;
    const auto err = testing::RowRelErrors(got, ref, V);
    int agree = 0;
    for (size_t r = 0; r < toks.size(); ++r) {
      const auto row = [&](auto& v) { return std::max_element(v.begin() + r * V, v.begin() + (r + 1) * V) - v.begin(); };
      agree += row(got) == row(ref);
    }
    const double worst = *std::max_element(err.begin(), err.end());
    std::printf("%-34s vs llama.cpp: max row relative error %.3g, top-1 agreement %d/%zu\n", c.name.c_str(), worst,
                agree, toks.size());
    EXPECT_LT(worst, 0.03) << c.name;
    EXPECT_GE(agree, static_cast<int>(toks.size()) - 2) << c.name;
    // Greedy continuations: the same tokens.
    std::string csv, theirs, mine;
    for (size_t i = 0; i < toks.size(); ++i) csv += (i ? "," : "") + std::to_string(toks[i]);
    for (size_t i = 0; i < ours.size(); ++i) mine += (i ? "," : "") + std::to_string(ours[i]);
    ASSERT_EQ(testing::RunCommand(ShellQuote(testing::PythonPath()) + " " +
                                      ShellQuote(testing::SourcePath("tests/python/llamacpp_ref.py")) + " " +
                                      ShellQuote(*path) + " " + csv + " --greedy " + std::to_string(kGreedy),
                                  &theirs),
              0);
    while (!theirs.empty() && theirs.back() == '\n') theirs.pop_back();
    std::printf("%-34s greedy: specd %s\n%-34s      llama.cpp %s\n", c.name.c_str(), mine.c_str(), "", theirs.c_str());
    EXPECT_EQ(mine, theirs) << c.name;
  }
  // The control: general.file_type as a string, as specd wrote it before.
  auto good = GgufFile::Open(dir.File("llama-F32.gguf"));
  ASSERT_TRUE(good.ok());
  GgufWriter w;
  for (const auto& [k, v] : (*good)->metadata()) w.Set(k, v);
  w.Set("general.file_type", GgufValue::Str("F32"));
  for (const auto& t : (*good)->tensors()) ASSERT_TRUE(w.AddTensor(t.name, t.type, t.ne, t.data, t.nbytes).ok());
  ASSERT_TRUE(w.WriteFile(dir.File("legacy.gguf")).ok());
  std::string out;
  EXPECT_NE(testing::RunCommand(ShellQuote(testing::PythonPath()) + " " +
                                    ShellQuote(testing::SourcePath("tests/python/llamacpp_ref.py")) + " " +
                                    ShellQuote(dir.File("legacy.gguf")) + " 1,2,3 " + ShellQuote(dir.File("x.bin")) +
                                    " 2>&1",
                                &out),
            0)
      << "llama.cpp loaded a file with a string general.file_type";
  // (llama.cpp's log, with verbose=True: "key general.file_type has wrong type str but expected type u32")
  EXPECT_NE(out.find("Failed to load model"), std::string::npos) << out;
}

// With SPECD_LLAMA_CPP_BIN (a llama.cpp build's bin directory): llama.cpp's
// own programs run on our files with the command lines tests/gpu/peer_bench.sh
// uses: llama-completion generates from every kind of file, llama-bench
// measures a target (its JSONL parsed), llama-speculative-simple speculates
// with a derived draft. (Their printed text is not compared: llama-completion
// prints tokens through an asynchronous logger that can drop the tail of the
// output at exit; the token-level comparison is the test above, on the same
// llama.cpp through its Python binding.)
TEST(GgufInterop, LlamaCppProgramsRunOurFiles) {
  const char* bin = std::getenv("SPECD_LLAMA_CPP_BIN");
  if (!bin || !*bin) {
    GTEST_SKIP() << "set SPECD_LLAMA_CPP_BIN to a llama.cpp build's bin directory (llama-completion, llama-bench, "
                    "llama-speculative-simple) to run llama.cpp's programs on make-model output";
  }
  const std::string dir_q = ShellQuote(std::string(bin));
  auto program = [&](const std::string& name) {
    const std::string p = std::string(bin) + "/" + name;
    EXPECT_EQ(access(p.c_str(), X_OK), 0) << p << " is not an executable";
    return "LD_LIBRARY_PATH=" + dir_q + ":${LD_LIBRARY_PATH:-} " + ShellQuote(p);
  };
  testing::TempDir dir;
  const std::string prompt = "The history of the city begins with a small harbour";
  const std::string err = ShellQuote(dir.File("llama.err"));
  auto tail = [&] {
    std::string t;
    testing::RunCommand("tail -n 20 " + err, &t);
    return t;
  };
  std::string target, draft;
  for (const auto& c : PeerCases()) {
    auto path = MakePeerFile(c, dir);
    ASSERT_TRUE(path.ok()) << c.name << ": " << path.status();
    if (c.derive_layers) {
      draft = *path;
      target = dir.File(c.name + "-target.gguf");
    }
    std::string out, log;
    ASSERT_EQ(testing::RunCommand(program("llama-completion") + " -m " + ShellQuote(*path) + " -p " +
                                      ShellQuote(prompt) + " -n 16 --temp 0 --ignore-eos -no-cnv --no-display-prompt " +
                                      "--no-warmup -t 2 -ngl 0 -c 256 2>" + err,
                                  &out),
              0)
        << c.name << ": llama-completion failed:\n" << tail();
    testing::RunCommand("cat " + err, &log);
    // 16 tokens: the first from the prompt's pass, 15 single-token runs.
    EXPECT_NE(log.find("/    15 runs"), std::string::npos) << c.name << "\n" << tail();
    std::printf("%-34s llama-completion: loaded, 16 tokens\n", c.name.c_str());
  }
  ASSERT_FALSE(target.empty());
  std::string out;
  ASSERT_EQ(testing::RunCommand(program("llama-bench") + " -m " + ShellQuote(target) +
                                    " -ngl 0 -fa 1 -p 4 -n 8 -d 0,32 -r 1 -t 2 -o jsonl 2>" + err,
                                &out),
            0)
      << tail();
  int lines = 0;
  for (size_t p = out.find("\"avg_ts\""); p != std::string::npos; p = out.find("\"avg_ts\"", p + 1)) ++lines;
  EXPECT_EQ(lines, 4) << "pp4 and tg8 at depths 0 and 32:\n" << out;
  ASSERT_EQ(testing::RunCommand(program("llama-speculative-simple") + " -m " + ShellQuote(target) + " -md " +
                                    ShellQuote(draft) + " -ngl 0 -ngld 0 -c 256 -n 32 --temp 0 --top-k 1 --ignore-eos " +
                                    "--spec-type draft-simple --spec-draft-n-max 6 --spec-draft-n-min 0 " +
                                    "--spec-draft-p-min 0 -t 2 -p " + ShellQuote(prompt) + " > /dev/null 2>" + err,
                                &out),
            0)
      << tail();
  std::string log;
  testing::RunCommand("grep -E 'decoded|accept' " + err, &log);
  EXPECT_NE(log.find("accept"), std::string::npos) << tail();
  std::printf("llama-speculative-simple on the blocks pair:\n%s", log.c_str());
}

}  // namespace
}  // namespace specd
