// GPU checks of the CUDA backend against the CPU reference, and kernel
// benchmarks. Run on a machine with a GPU (the device tool); elsewhere it
// prints "SKIP: no CUDA device" and exits 0.
//
//   gpu_check                correctness: ops and whole generated models
//   gpu_check --bench        microbenchmarks (matvec GB/s, attention, copy
//                            bandwidth) and 32B/3B-class decode/verify steps
//   gpu_check --quick        correctness on a subset (one arch)
//   gpu_check --no-matmul    correctness without the matmul checks (every arch
//                            and type; for changes outside the matvec)
//   gpu_check --matmul-only  the matmul checks alone (every weight type; for
//                            changes inside the matvec)
//   gpu_check --types Q4_K,Q6_K ...  the matmul checks of those weight types only
//   gpu_check --attn-only    the attention-layer checks alone (every case, both kernels)
//   gpu_check --spec         the speculative-step checks only (device sampler,
//                            acceptance, proposal, lossless speculation)
//   gpu_check --spec-host    the same on the host-sampling fallback
//                            (--cuda-device-sampling=false)
//   gpu_check --bench-matvec the matvec microbenchmark alone
//   gpu_check --attn-split N ...  the same at attention splits of N positions
//   gpu_check --wgmma-cols MIN-MAX|off ...  the same with the wgmma matvec on those column counts
//                            (--cuda-wgmma-cols; default 9-32)
//   gpu_check --profile-step [SEQS TOKENS CTX [KV]]
//                            one 27B-class forward (default: a decode step at
//                            4081, KV q8_0; KV f16 as specd bench's default)
//                            between cudaProfilerStart/Stop, for ncu
//
// Correctness (every check prints PASS/FAIL with its numbers; exit 1 on any FAIL):
//  * MatMul per weight type and column count vs the CPU backend (relative
//    error bounds below), the reference (dequantize + FP32) path, the cuBLAS
//    path, and bit-identical columns whatever the column count.
//  * Generated llama / qwen2 / qwen3 models in every weight type and KV f16 /
//    q8_0 / f32: logits vs CPU after an 80-token prefill and 8 decode steps;
//    a k+1 verify batch bit-identical to sequential decode; a 24-token
//    prefill bit-identical to 24 single-token steps; an 80-token (cuBLAS)
//    prefill close to 80 single steps; KV truncate/rollback then re-extend
//    bit-identical; two sequences batched bit-identical to each alone;
//    greedy speculative decoding equal to greedy target-only decoding.
//  * One attention layer vs the CPU backend (kernels v2 and v1; KV F16, Q8_0,
//    F32; head_dim 32..256; groups 1..48; contexts crossing chunk, split and
//    block boundaries): verify(7) and decode within 1e-4, and decode ==
//    verify == 16-token batch bit for bit.
//  * CUDA IPC export/open across processes; the device acceptance rule equal
//    to VerifyProposals.
//  * Speculative steps on the device (also alone: gpu_check --spec): the
//    device sampler (Backend::Sample) vs the CPU sampler on the same rows and
//    random numbers (greedy, temperature, top-k, top-p, min-p, repetition
//    penalty; vocabularies of 5000 and 151936): same tokens, same
//    probability rows and confidences; Backend::Accept vs the CPU's (dense and
//    one-hot q, greedy and sampled): same decisions; a device-resident
//    proposal (LocalDraft on CUDA) == the proposal sampled on the host from
//    the same engine's logits; greedy speculation through LocalDraft /
//    LocalTarget on CUDA == greedy target-only, and sampled speculation on
//    the device rows == on the host rows.
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/backend/backend.h"
#include "common/backend/cpu/cpu_backend.h"
#include "common/backend/cuda/cuda_backend.h"
#include "common/backend/cuda/cuda_ipc.h"
#include "common/backend/cuda/kernels.h"
#include "common/engine/engine.h"
#include "common/engine/spec_local.h"
#include "common/gguf/gguf.h"
#include "common/modelgen/modelgen.h"
#include "common/model/model.h"
#include "common/quant/mmv_tiles.h"
#include "common/quant/quant.h"
#include "common/sampler/rng.h"
#include "common/sampler/sampler.h"
#include "common/spec/acceptance.h"
#include "common/spec/loop.h"
#include "common/spec/warmup.h"

namespace specd {
namespace {

// Attention kernel / split for the backends created next (process-wide tuning).
void SetAttn(int kernel, int split = 0) {
  cuda::Tuning t = cuda::GetTuning();
  t.attn_kernel = kernel;
  if (split > 0) t.attn_split = split;
  cuda::SetTuning(t);
}

int g_failures = 0;
int g_checks = 0;

void Check(bool ok, const std::string& what) {
  ++g_checks;
  std::printf("%s  %s\n", ok ? "PASS" : "FAIL", what.c_str());
  std::fflush(stdout);
  if (!ok) ++g_failures;
}

#define CHECK_OK(expr)                                                                       \
  do {                                                                                       \
    const absl::Status st_ = (expr);                                                         \
    if (!st_.ok()) {                                                                         \
      Check(false, absl::StrCat(#expr, " -> ", st_.ToString()));                             \
      return;                                                                                \
    }                                                                                        \
  } while (0)

#define CUDA_OK(expr)                                                                        \
  do {                                                                                       \
    const cudaError_t e_ = (expr);                                                           \
    if (e_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(2);                                                                          \
    }                                                                                        \
  } while (0)

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9e3779b97f4a7c15ull + 1) {}
  uint64_t Next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double U() { return static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0); }
  float Gauss() {
    const double u1 = std::max(U(), 1e-300), u2 = U();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  int Int(int n) { return static_cast<int>(Next() % static_cast<uint64_t>(n)); }
};

double RelErr(const float* a, const float* ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    const double d = static_cast<double>(a[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

bool BitEqual(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

std::string Fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", v);
  return buf;
}

// ------------------------------------------------------------------ model files

struct Shape {
  const char* arch;
  int layers, d, heads, kv_heads, head_dim, ffn, vocab;
  bool tied;
  float rope_base;
};

const Shape kLlama = {"llama", 2, 256, 8, 4, 32, 512, 1000, false, 10000.0f};
const Shape kQwen2 = {"qwen2", 2, 256, 4, 2, 64, 768, 1000, false, 1000000.0f};
const Shape kQwen3 = {"qwen3", 2, 256, 8, 2, 64, 512, 1000, true, 1000000.0f};

uint64_t HashStr(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// rows x k Gaussian weights (standard deviation `stddev`) quantized to
// `type`, as GGUF rows.
absl::StatusOr<std::vector<uint8_t>> RandomQuantRows(GgmlType type, int64_t rows, int64_t k, float stddev, Rng& r) {
  const size_t rb = RowBytes(type, k);
  std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t i = 0; i < rows; ++i) {
    for (auto& v : row) v = r.Gauss() * stddev;
    SPECD_RETURN_IF_ERROR(QuantizeRow(type, row.data(), w.data() + rb * i, k));
  }
  return w;
}

// The type a tensor gets in a model of `wtype` ("Q4_K_M": llama.cpp-like mix).
GgmlType TypeFor(const std::string& wtype, const std::string& name, int layer, int n_layers) {
  if (wtype == "Q4_K_M" || wtype == "Q4_K_S") {
    const bool more = layer >= 0 && (layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2);
    if (name == "output.weight") return GgmlType::Q6_K;
    const bool v = name.find("attn_v.weight") != std::string::npos;
    const bool down = name.find("ffn_down.weight") != std::string::npos;
    if (wtype == "Q4_K_M" && (v || down) && more) return GgmlType::Q6_K;
    if (wtype == "Q4_K_S" && down && layer >= 0 && layer < n_layers / 8) return GgmlType::Q5_K;
    return GgmlType::Q4_K;
  }
  return *TypeFromName(wtype);
}

absl::StatusOr<std::vector<uint8_t>> MakeModel(const Shape& s, const std::string& wtype, uint64_t seed) {
  GgufWriter w;
  const std::string a = std::string(s.arch) + ".";
  w.Set("general.architecture", GgufValue::Str(s.arch));
  w.Set("general.name", GgufValue::Str(absl::StrCat("gpu-check-", s.arch, "-", wtype)));
  w.Set(a + "block_count", GgufValue::U32(s.layers));
  w.Set(a + "context_length", GgufValue::U32(4096));
  w.Set(a + "embedding_length", GgufValue::U32(s.d));
  w.Set(a + "feed_forward_length", GgufValue::U32(s.ffn));
  w.Set(a + "attention.head_count", GgufValue::U32(s.heads));
  w.Set(a + "attention.head_count_kv", GgufValue::U32(s.kv_heads));
  w.Set(a + "attention.key_length", GgufValue::U32(s.head_dim));
  w.Set(a + "attention.value_length", GgufValue::U32(s.head_dim));
  w.Set(a + "attention.layer_norm_rms_epsilon", GgufValue::F32(1e-6f));
  w.Set(a + "rope.freq_base", GgufValue::F32(s.rope_base));
  const int64_t d = s.d, q = int64_t{s.heads} * s.head_dim, kv = int64_t{s.kv_heads} * s.head_dim, ff = s.ffn,
                V = s.vocab;
  auto matrix = [&](const std::string& name, int64_t ne0, int64_t ne1, float stddev, int layer) -> absl::Status {
    GgmlType t = TypeFor(wtype, name, layer, s.layers);
    if (ne0 % TypeTraits(t).block_size != 0) t = GgmlType::F16;
    Rng r(seed ^ HashStr(name));
    SPECD_ASSIGN_OR_RETURN(const std::vector<uint8_t> bytes, RandomQuantRows(t, ne1, ne0, stddev, r));
    return w.AddTensor(name, t, {ne0, ne1}, bytes.data(), bytes.size());
  };
  auto vec = [&](const std::string& name, int64_t n, float mean, float stddev) -> absl::Status {
    Rng r(seed ^ HashStr(name));
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = mean + r.Gauss() * stddev;
    return w.AddTensorF32(name, {n}, v.data());
  };
  const float upd = 0.5f / std::sqrt(2.0f * s.layers);
  SPECD_RETURN_IF_ERROR(matrix("token_embd.weight", d, V, 1.0f, -1));
  for (int l = 0; l < s.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    SPECD_RETURN_IF_ERROR(vec(b + "attn_norm.weight", d, 1.0f, 0.1f));
    SPECD_RETURN_IF_ERROR(matrix(b + "attn_q.weight", d, q, 2.0f / std::sqrt(float(d)), l));
    SPECD_RETURN_IF_ERROR(matrix(b + "attn_k.weight", d, kv, 2.0f / std::sqrt(float(d)), l));
    SPECD_RETURN_IF_ERROR(matrix(b + "attn_v.weight", d, kv, 1.0f / std::sqrt(float(d)), l));
    SPECD_RETURN_IF_ERROR(matrix(b + "attn_output.weight", q, d, upd / std::sqrt(float(q)), l));
    if (std::string(s.arch) == "qwen2") {
      SPECD_RETURN_IF_ERROR(vec(b + "attn_q.bias", q, 0.0f, 0.1f));
      SPECD_RETURN_IF_ERROR(vec(b + "attn_k.bias", kv, 0.0f, 0.1f));
      SPECD_RETURN_IF_ERROR(vec(b + "attn_v.bias", kv, 0.0f, 0.1f));
    }
    if (std::string(s.arch) == "qwen3") {
      SPECD_RETURN_IF_ERROR(vec(b + "attn_q_norm.weight", s.head_dim, 1.0f, 0.1f));
      SPECD_RETURN_IF_ERROR(vec(b + "attn_k_norm.weight", s.head_dim, 1.0f, 0.1f));
    }
    SPECD_RETURN_IF_ERROR(vec(b + "ffn_norm.weight", d, 1.0f, 0.1f));
    SPECD_RETURN_IF_ERROR(matrix(b + "ffn_gate.weight", d, ff, 1.0f / std::sqrt(float(d)), l));
    SPECD_RETURN_IF_ERROR(matrix(b + "ffn_up.weight", d, ff, 1.0f / std::sqrt(float(d)), l));
    SPECD_RETURN_IF_ERROR(matrix(b + "ffn_down.weight", ff, d, 1.6f * upd / std::sqrt(float(ff)), l));
  }
  SPECD_RETURN_IF_ERROR(vec("output_norm.weight", d, 1.0f, 0.1f));
  if (!s.tied) SPECD_RETURN_IF_ERROR(matrix("output.weight", d, V, 3.0f / std::sqrt(float(d)), -1));
  return w.Serialize();
}

// ------------------------------------------------------------------ running models

constexpr int kBlockSize = 16;
constexpr int kBlocksPerSlot = 8;  // 128 positions per test sequence
constexpr int kSlots = 8;

// The KV cache of a loaded model: n_blocks blocks of block_size positions.
KvLayout KvOf(const ModelConfig& c, int block_size, int64_t n_blocks, GgmlType type) {
  KvLayout kv;
  kv.n_layers = c.n_layers;
  kv.n_kv_heads = c.n_kv_heads;
  kv.head_dim = c.head_dim;
  kv.block_size = block_size;
  kv.n_blocks = n_blocks;
  kv.type = type;
  return kv;
}

struct Runner {
  std::unique_ptr<Backend> be;
  std::unique_ptr<Model> model;
  int vocab = 0;

  absl::Status Init(const std::string& backend, const GgufFile& f, GgmlType kv_type, bool graphs = true) {
    BackendOptions o;
    o.name = backend;
    o.threads = 0;
    o.cuda_graphs = graphs;
    if (backend == "cpu") {
      // The exact reference: float activations (the CPU backend's default
      // quantizes them to int8, ~5e-3 relative error).
      auto cpu = std::make_unique<CpuBackend>(0);
      cpu->set_float_activations(true);
      be = std::move(cpu);
    } else {
      SPECD_ASSIGN_OR_RETURN(be, CreateCudaBackend(o));
    }
    SPECD_ASSIGN_OR_RETURN(model, Model::Load(f, be.get(), 128, 128));
    const ModelConfig& c = model->config();
    vocab = c.vocab_size;
    return be->InitKv(KvOf(c, kBlockSize, kBlocksPerSlot * kSlots, kv_type));
  }

  // Feeds tokens of one or more sequences; returns logits of the requested rows.
  struct Feed {
    int slot;
    std::vector<int32_t> tokens;
    int pos0;
    bool all_logits;
  };
  absl::StatusOr<std::vector<float>> Run(const std::vector<Feed>& feeds) {
    Batch b;
    for (const Feed& f : feeds) {
      const int si = static_cast<int>(b.seqs.size());
      BatchSeq s;
      s.slot = f.slot;
      s.kv_len = f.pos0 + static_cast<int>(f.tokens.size());
      for (int i = 0; i < (s.kv_len + kBlockSize - 1) / kBlockSize; ++i) s.blocks.push_back(f.slot * kBlocksPerSlot + i);
      b.seqs.push_back(s);
      for (size_t i = 0; i < f.tokens.size(); ++i) {
        b.tokens.push_back(f.tokens[i]);
        b.pos.push_back(f.pos0 + static_cast<int>(i));
        b.seq_index.push_back(si);
        if (f.all_logits || i + 1 == f.tokens.size()) b.out_rows.push_back(b.n_tokens() - 1);
      }
    }
    SPECD_ASSIGN_OR_RETURN(const float* out, model->Forward(b));
    std::vector<float> host(static_cast<size_t>(b.n_out()) * vocab);
    SPECD_RETURN_IF_ERROR(be->ReadToHost(out, host.data(), host.size()));
    return host;
  }
  absl::StatusOr<std::vector<float>> Run(int slot, const std::vector<int32_t>& tokens, int pos0, bool all) {
    return Run(std::vector<Feed>{{slot, tokens, pos0, all}});
  }
};

int32_t ArgmaxRow(const std::vector<float>& l, int row, int vocab) {
  return Argmax(l.data() + static_cast<size_t>(row) * vocab, vocab);
}

// Bounds on ||gpu - cpu|| / ||cpu|| of the logits. The GPU prefill (80 tokens)
// runs cuBLAS on F16 tiles and F16 activations (F32 weights: FP32 SGEMM);
// decode runs the int8x2 tensor-core matvec (~16-bit activations) or FP32
// FMA for float weights. KV q8_0 can flip roundings of the cached keys.
double LogitBound(const std::string& wtype, GgmlType kv) {
  double b = wtype == "F32" ? 2e-4 : 3e-3;
  if (kv == GgmlType::Q8_0) b *= 3;
  return b;
}

void CheckModel(const Shape& shape, const std::string& wtype, GgmlType kv_type, bool full) {
  const std::string tag = absl::StrCat(shape.arch, "/", wtype, "/kv=", std::string(TypeName(kv_type)));
  auto bytes = MakeModel(shape, wtype, 7);
  CHECK_OK(bytes.status());
  auto file = GgufFile::FromBuffer(bytes->data(), bytes->size(), tag);
  CHECK_OK(file.status());
  Runner cpu, gpu;
  CHECK_OK(cpu.Init("cpu", **file, kv_type));
  CHECK_OK(gpu.Init("cuda", **file, kv_type));
  const int V = gpu.vocab;
  Rng r(HashStr(tag));
  std::vector<int32_t> prompt(80), cont(8);
  for (auto& t : prompt) t = r.Int(V);
  for (auto& t : cont) t = r.Int(V);

  // 1. Prefill (cuBLAS on the GPU) + 8 decode steps, GPU vs CPU.
  double worst = 0;
  int agree = 0;
  std::vector<std::vector<float>> gpu_dec;
  {
    auto lc = cpu.Run(0, prompt, 0, false);
    auto lg = gpu.Run(0, prompt, 0, false);
    CHECK_OK(lc.status());
    CHECK_OK(lg.status());
    worst = std::max(worst, RelErr(lg->data(), lc->data(), V));
    agree += ArgmaxRow(*lg, 0, V) == ArgmaxRow(*lc, 0, V);
    for (int i = 0; i < 8; ++i) {
      auto dc = cpu.Run(0, {cont[i]}, 80 + i, false);
      auto dg = gpu.Run(0, {cont[i]}, 80 + i, false);
      CHECK_OK(dc.status());
      CHECK_OK(dg.status());
      worst = std::max(worst, RelErr(dg->data(), dc->data(), V));
      agree += ArgmaxRow(*dg, 0, V) == ArgmaxRow(*dc, 0, V);
      gpu_dec.push_back(*dg);
    }
    const double bound = LogitBound(wtype, kv_type);
    Check(worst <= bound, absl::StrCat(tag, ": logits vs CPU, max rel err ", Fmt(worst), " (bound ", Fmt(bound),
                                       "), argmax agrees ", agree, "/9"));
  }
  // 2. k+1 verify batch == sequential decode, bit for bit.
  {
    CHECK_OK(gpu.Run(1, prompt, 0, false).status());
    auto lv = gpu.Run(1, cont, 80, true);
    CHECK_OK(lv.status());
    bool same = true;
    for (int i = 0; i < 8; ++i) same = same && BitEqual(lv->data() + static_cast<size_t>(i) * V, gpu_dec[i].data(), V);
    Check(same, tag + ": 8-token verify batch bit-identical to 8 decode steps");
  }
  if (!full) return;
  // 3. 24-token prefill (batch-invariant kernels) == 24 single steps, bitwise;
  //    80-token prefill (cuBLAS) close to 80 single steps.
  {
    std::vector<int32_t> p24(prompt.begin(), prompt.begin() + 24);
    auto lp = gpu.Run(2, p24, 0, true);
    CHECK_OK(lp.status());
    bool same = true;
    std::vector<float> last;
    for (int i = 0; i < 80; ++i) {
      auto ls = gpu.Run(3, {prompt[i]}, i, false);
      CHECK_OK(ls.status());
      if (i < 24) same = same && BitEqual(ls->data(), lp->data() + static_cast<size_t>(i) * V, V);
      last = *ls;
    }
    Check(same, tag + ": 24-token prefill bit-identical to 24 single-token steps");
    auto lpre = gpu.Run(4, prompt, 0, false);
    CHECK_OK(lpre.status());
    const double e = RelErr(lpre->data(), last.data(), V);
    const double bound = LogitBound(wtype, kv_type);
    Check(e <= bound, absl::StrCat(tag, ": 80-token prefill vs 80 single steps, rel err ", Fmt(e), " (bound ",
                                   Fmt(bound), ")"));
  }
  // 4. Truncate to 83 positions, write two other tokens, roll back, re-extend.
  {
    CHECK_OK(gpu.Run(0, {static_cast<int32_t>((cont[3] + 1) % V), static_cast<int32_t>((cont[4] + 7) % V)}, 83, true)
                 .status());
    bool same = true;
    for (int i = 3; i < 8; ++i) {
      auto l = gpu.Run(0, {cont[i]}, 80 + i, false);
      CHECK_OK(l.status());
      same = same && BitEqual(l->data(), gpu_dec[i].data(), V);
    }
    Check(same, tag + ": KV rollback to 83 then re-extend bit-identical");
  }
  // 5. Two sequences in one batch == each alone.
  {
    auto both = gpu.Run(std::vector<Runner::Feed>{{0, {cont[7]}, 87, false}, {1, {cont[7]}, 87, false}});
    CHECK_OK(both.status());
    Check(BitEqual(both->data(), gpu_dec[7].data(), V) && BitEqual(both->data() + V, gpu_dec[7].data(), V),
          tag + ": two sequences batched bit-identical to decoding alone");
  }
}

// Greedy speculative decoding (draft proposes k, target verifies k+1 in one
// batch, both roll back) must produce exactly greedy target-only output.
void CheckSpeculative(const Shape& shape, const std::string& wtype, const std::string& draft_type) {
  const std::string tag = absl::StrCat(shape.arch, "/", wtype, " + draft ", draft_type);
  auto tb = MakeModel(shape, wtype, 7);
  Shape ds = shape;
  ds.layers = 1;
  auto db = MakeModel(ds, draft_type, 7);  // same seed: the draft shares layer 0 and the embeddings
  CHECK_OK(tb.status());
  CHECK_OK(db.status());
  auto tf = GgufFile::FromBuffer(tb->data(), tb->size(), "target");
  auto df = GgufFile::FromBuffer(db->data(), db->size(), "draft");
  CHECK_OK(tf.status());
  CHECK_OK(df.status());
  Runner target, draft;
  CHECK_OK(target.Init("cuda", **tf, GgmlType::F16));
  CHECK_OK(draft.Init("cuda", **df, GgmlType::F16));
  const int V = target.vocab;
  Rng r(HashStr(tag));
  std::vector<int32_t> prompt(20);
  for (auto& t : prompt) t = r.Int(V);
  const int kGen = 40, k = 4;
  // Target only.
  std::vector<int32_t> ref;
  {
    auto l = target.Run(0, prompt, 0, false);
    CHECK_OK(l.status());
    int32_t tok = ArgmaxRow(*l, 0, V);
    int pos = 20;
    while (static_cast<int>(ref.size()) < kGen) {
      ref.push_back(tok);
      auto s = target.Run(0, {tok}, pos++, false);
      CHECK_OK(s.status());
      tok = ArgmaxRow(*s, 0, V);
    }
  }
  // Speculative.
  std::vector<int32_t> out;
  int proposed = 0, accepted = 0;
  {
    auto lt = target.Run(1, prompt, 0, false);
    auto ld = draft.Run(1, prompt, 0, false);
    CHECK_OK(lt.status());
    CHECK_OK(ld.status());
    int32_t pending = ArgmaxRow(*lt, 0, V);  // decided, not yet in either KV
    int len = 20;                            // positions in both KVs
    while (static_cast<int>(out.size()) < kGen) {
      out.push_back(pending);
      std::vector<int32_t> props;
      int32_t cur = pending;
      for (int i = 0; i < k; ++i) {
        auto l = draft.Run(1, {cur}, len + i, false);
        CHECK_OK(l.status());
        cur = ArgmaxRow(*l, 0, V);
        props.push_back(cur);
      }
      std::vector<int32_t> vt = {pending};
      vt.insert(vt.end(), props.begin(), props.end());
      auto lv = target.Run(1, vt, len, true);
      CHECK_OK(lv.status());
      int n_acc = 0;
      while (n_acc < k && ArgmaxRow(*lv, n_acc, V) == props[n_acc]) ++n_acc;
      proposed += k;
      accepted += n_acc;
      for (int i = 0; i < n_acc && static_cast<int>(out.size()) < kGen; ++i) out.push_back(props[i]);
      pending = ArgmaxRow(*lv, n_acc, V);
      if (n_acc == k) CHECK_OK(draft.Run(1, {props[k - 1]}, len + k, false).status());  // the draft never saw d_k
      len += 1 + n_acc;  // both KVs keep pending + accepted; the rest is overwritten later
    }
    out.resize(kGen);
  }
  Check(out == ref, absl::StrCat(tag, ": greedy speculative output == greedy target-only (", kGen,
                                 " tokens, acceptance ", accepted, "/", proposed, ")"));
}

// ------------------------------------------------------------------ op-level matmul

// The speculative ops' implementation under test: the device kernels (the
// product's default) or the host fallback (--spec-host,
// BackendOptions::cuda_device_sampling off: rows read back, host reference).
bool g_device_sampling = true;
const char* SamplingMode() { return g_device_sampling ? "device kernels" : "host-sampled"; }

struct OpEnv {
  std::unique_ptr<Backend> gpu;
  CudaBackendControl* ctl = nullptr;
  CpuBackend cpu{0};
  absl::Status Init() {
    BackendOptions o;
    o.name = "cuda";
    o.cuda_graphs = false;
    o.cuda_device_sampling = g_device_sampling;
    SPECD_ASSIGN_OR_RETURN(gpu, CreateCudaBackend(o));
    ctl = AsCudaControl(gpu.get());
    KvLayout kv;
    kv.n_layers = 1;
    kv.n_kv_heads = 1;
    kv.head_dim = 32;
    kv.block_size = 16;
    kv.n_blocks = 4;
    SPECD_RETURN_IF_ERROR(gpu->InitKv(kv));
    Batch b;  // ops need a current batch
    b.tokens = {0};
    b.pos = {0};
    b.seq_index = {0};
    b.seqs = {BatchSeq{0, 1, {0}}};
    return gpu->SetBatch(b);
  }
};

// The weight types --types asked for (empty: every type).
std::vector<GgmlType> g_types;
bool TypeWanted(GgmlType t) { return g_types.empty() || absl::c_linear_search(g_types, t); }

void CheckMatMul(OpEnv& env, GgmlType type, int64_t rows, int64_t k) {
  if (!TypeWanted(type)) return;
  const std::string tag = absl::StrCat("matmul ", std::string(TypeName(type)), " ", rows, "x", k);
  Rng r(HashStr(tag));
  const size_t rb = RowBytes(type, k);
  auto wq = RandomQuantRows(type, rows, k, 0.05f, r);
  CHECK_OK(wq.status());
  const std::vector<uint8_t>& w = *wq;
  std::vector<float> bias(rows);
  for (auto& v : bias) v = r.Gauss();
  WeightSource src{"w", type, k, rows, w.data(), w.size()};
  WeightSource bsrc{"b", GgmlType::F32, rows, 1, bias.data(), bias.size() * 4};
  auto wc = env.cpu.LoadWeight(src);
  auto wg = env.gpu->LoadWeight(src);
  auto bc = env.cpu.LoadWeight(bsrc);
  auto bg = env.gpu->LoadWeight(bsrc);
  CHECK_OK(wg.status());
  CHECK_OK(bg.status());
  const bool packed = mmv::HasLayout(type);
  std::vector<uint8_t> pk;
  if (packed) {  // the device packer writes the host packer's bytes
    pk.resize(mmv::PackedBytes(type, rows, k));
    mmv::PackMatrix(type, w.data(), rb, rows, k, pk.data());
    std::vector<uint8_t> dev(pk.size());
    CUDA_OK(cudaMemcpy(dev.data(), wg->data, dev.size(), cudaMemcpyDeviceToHost));
    Check(dev == pk, tag + ": packed on the device == packed on the host (" + std::to_string(pk.size()) + " bytes)");
  }
  const int kMaxN = 100;
  std::vector<float> x(static_cast<size_t>(kMaxN) * k);
  for (size_t i = 0; i < x.size(); ++i) x[i] = r.Gauss() * (i % 97 == 0 ? 8.0f : 1.0f);  // a few outliers
  auto xd = env.gpu->AllocActivations(x.size());
  auto yd = env.gpu->AllocActivations(static_cast<size_t>(kMaxN) * rows);
  CHECK_OK(xd.status());
  CHECK_OK(yd.status());
  CUDA_OK(cudaMemcpy(*xd, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  std::vector<float> yc(static_cast<size_t>(kMaxN) * rows), yg(yc.size());
  env.cpu.set_float_activations(true);  // exact reference (int8 activations are the CPU default)
  env.cpu.MatMul(*wc, &*bc, x.data(), kMaxN, yc.data());
  CHECK_OK(env.cpu.Synchronize());  // the CPU backend queues MatMuls until the next op or sync
  auto gpu_mm = [&](int n, const float* xp, std::vector<float>* out) -> absl::Status {
    CUDA_OK(cudaMemsetAsync(*yd, 0xff, static_cast<size_t>(n) * rows * 4,
                            static_cast<cudaStream_t>(env.ctl->Stream())));  // poison: NaN
    env.gpu->MatMul(*wg, &*bg, xp, n, *yd);
    out->resize(static_cast<size_t>(n) * rows);
    return env.gpu->ReadToHost(*yd, out->data(), out->size());
  };
  const bool is_float = type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16;
  // Quantized weights: activations as two int8 levels per 32-element unit
  // (~2^-16 of the unit's max), so an outlier (x8 here) coarsens its unit.
  const double bound = is_float ? 1e-5 : 3e-4;
  double worst = 0;
  std::vector<float> y1;
  CHECK_OK(gpu_mm(1, *xd, &y1));
  bool inv = true;
  for (int n : {1, 2, 3, 4, 7, 8, 9, 16, 17, 31, 32, 33, 40, 64}) {
    CHECK_OK(gpu_mm(n, *xd, &yg));
    for (int c = 0; c < n; ++c) worst = std::max(worst, RelErr(yg.data() + c * rows, yc.data() + c * rows, rows));
    inv = inv && BitEqual(yg.data(), y1.data(), rows);
    // The last column computed alone.
    std::vector<float> ylast;
    CHECK_OK(gpu_mm(1, *xd + static_cast<size_t>(n - 1) * k, &ylast));
    inv = inv && BitEqual(yg.data() + static_cast<size_t>(n - 1) * rows, ylast.data(), rows);
  }
  Check(worst <= bound, absl::StrCat(tag, ": n=1..64 vs CPU, max rel err ", Fmt(worst), " (bound ", Fmt(bound), ")"));
  Check(inv, tag + ": each column bit-identical whatever the column count (1..64)");
  if (packed) {  // the kernel computes exactly what the host emulation of its arithmetic computes
    const mmv::Plan plan = cuda::MmvPlan(type, mmv::Tiles(rows), k);
    // Where the wgmma kernel runs, its column range and then the mma.sync
    // kernels on every column count (graphs are off here: the tuning is read
    // at each launch).
    const cuda::Tuning tuning = cuda::GetTuning();
    const bool wg_type = cuda::MatvecWgmmaRuns(type);
    std::vector<std::pair<int, int>> ranges = {{tuning.wgmma_min_cols, tuning.wgmma_max_cols}};
    if (wg_type && tuning.wgmma_min_cols > 0) ranges.push_back({0, 0});
    for (const auto& [lo, hi] : ranges) {
      cuda::Tuning t = tuning;
      t.wgmma_min_cols = lo;
      t.wgmma_max_cols = hi;
      cuda::SetTuning(t);
      bool same = true;
      int first_bad = -1;
      std::vector<int> on_wgmma;  // the column counts whose launches took the wgmma kernel
      // 1, 3, 4: paired levels (one MMA per unit); 5, 7: one column tile; 9, 16: two; 17-32: the wide
      // kernel (its parts folded by the last block); 40: 32 + 8; 64: two wide passes.
      for (int n : {1, 3, 4, 5, 7, 9, 16, 17, 24, 30, 32, 40, 64}) {
        if (cuda::MatvecWgmmaTakes(type, std::min(n, cuda::kMmvMaxCols), rows)) on_wgmma.push_back(n);
        CHECK_OK(gpu_mm(n, *xd, &yg));
        const auto xq = mmv::QuantizeActivations(x.data(), n, k);
        std::vector<float> ye(static_cast<size_t>(n) * rows);
        mmv::Emulate(type, pk.data(), rows, k, xq.data(), n, plan, bias.data(), ye.data());
        if (!BitEqual(yg.data(), ye.data(), ye.size()) && same) {
          same = false;
          first_bad = n;
        }
      }
      Check(same, absl::StrCat(tag, ": kernel == host emulation bit for bit for n = 1, 3, 4, 5, 7, 9, 16, 17, 24, "
                                    "30, 32, 40, 64 (",
                               plan.tile_warps, " warps x ", plan.gpw, " groups per tile; ",
                               on_wgmma.empty() ? "mma.sync"
                                                : absl::StrCat("wgmma at n = ", absl::StrJoin(on_wgmma, ", ")),
                               ")",
                               first_bad > 0 ? absl::StrCat("; first difference at n=", first_bad) : ""));
    }
    cuda::SetTuning(tuning);
  }
  // Reference path and cuBLAS path.
  env.ctl->SetMatMulPath(CudaBackendControl::MatMulPath::kDequant);
  CHECK_OK(gpu_mm(5, *xd, &yg));
  double e_ref = 0;
  for (int c = 0; c < 5; ++c) e_ref = std::max(e_ref, RelErr(yg.data() + c * rows, yc.data() + c * rows, rows));
  env.ctl->SetMatMulPath(CudaBackendControl::MatMulPath::kAuto);
  Check(e_ref <= 1e-5, absl::StrCat(tag, ": reference (dequantize + FP32) path vs CPU, rel err ", Fmt(e_ref)));
  // Prompt paths (any n past kMmvMaxN): the quantized GEMM on k-quant tiles
  // (n = 65: one column past a block; 100: a partial second block; the
  // shapes above give split-K plans of 1 to 8 parts), then cuBLAS on F16
  // tiles with it off.
  const double gb = type == GgmlType::F32 ? 1e-5 : 3e-3;
  auto gemm_err = [&](int n) -> double {  // (a failed run: infinite)
    env.ctl->SetMatMulPath(CudaBackendControl::MatMulPath::kGemm);
    const absl::Status st = gpu_mm(n, *xd, &yg);
    env.ctl->SetMatMulPath(CudaBackendControl::MatMulPath::kAuto);
    if (!st.ok()) {
      Check(false, absl::StrCat(tag, ": prompt path n=", n, " -> ", st.ToString()));
      return HUGE_VAL;
    }
    double e = 0;
    for (int c = 0; c < n; ++c) e = std::max(e, RelErr(yg.data() + c * rows, yc.data() + c * rows, rows));
    return e;
  };
  const cuda::Tuning tuning = cuda::GetTuning();
  if (cuda::QGemmSupported(type, k) && tuning.qgemm_max_n >= kMaxN) {
    const cuda::QGemmShape qs = cuda::QGemmPlan(type, rows, k, kMaxN);
    const double e = std::max(gemm_err(65), gemm_err(kMaxN));
    Check(e <= gb, absl::StrCat(tag, ": quantized prompt GEMM (n=65, 100; ", qs.parts, " parts of ", qs.gpp,
                                " groups) vs CPU, rel err ", Fmt(e), " (bound ", Fmt(gb), ")"));
    cuda::Tuning off = tuning;
    off.qgemm_max_n = 0;
    cuda::SetTuning(off);
  }
  const double e_gemm = gemm_err(kMaxN);
  cuda::SetTuning(tuning);
  Check(e_gemm <= gb, absl::StrCat(tag, ": cuBLAS path (n=100) vs CPU, rel err ", Fmt(e_gemm), " (bound ", Fmt(gb), ")"));
}

// q/k/v-style grouping: three matrices of one type on the same activations run
// as one launch (a wide block's tiles may span two of them); each matrix's
// result must be bit-identical to its own launch.
void CheckGroupedMatMul(OpEnv& env, GgmlType type, int64_t k) {
  if (!TypeWanted(type)) return;
  const std::string tag = absl::StrCat("grouped matmul ", std::string(TypeName(type)), " 200+40+40 x ", k);
  Rng r(HashStr(tag));
  const int64_t rows[3] = {200, 40, 40};
  const int kN = 40;
  std::vector<Weight> ws;
  std::vector<float*> ys;
  for (int m = 0; m < 3; ++m) {
    auto wq = RandomQuantRows(type, rows[m], k, 0.05f, r);
    CHECK_OK(wq.status());
    const std::vector<uint8_t>& w = *wq;
    auto wg = env.gpu->LoadWeight({absl::StrCat("g", m), type, k, rows[m], w.data(), w.size()});
    CHECK_OK(wg.status());
    ws.push_back(*wg);
    auto y = env.gpu->AllocActivations(static_cast<size_t>(kN) * rows[m]);
    CHECK_OK(y.status());
    ys.push_back(*y);
  }
  std::vector<float> x(static_cast<size_t>(kN) * k);
  for (auto& v : x) v = r.Gauss();
  auto xd = env.gpu->AllocActivations(x.size());
  CHECK_OK(xd.status());
  CUDA_OK(cudaMemcpy(*xd, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  bool same = true;
  for (int n : {1, 7, 16, 24, 40}) {
    std::vector<float> grouped[3], alone(1);
    for (int m = 0; m < 3; ++m) env.gpu->MatMul(ws[m], nullptr, *xd, n, ys[m]);  // recorded together: one launch
    for (int m = 0; m < 3; ++m) {
      grouped[m].resize(static_cast<size_t>(n) * rows[m]);
      CHECK_OK(env.gpu->ReadToHost(ys[m], grouped[m].data(), grouped[m].size()));
    }
    for (int m = 0; m < 3; ++m) {
      env.gpu->MatMul(ws[m], nullptr, *xd, n, ys[m]);
      alone.resize(static_cast<size_t>(n) * rows[m]);
      CHECK_OK(env.gpu->ReadToHost(ys[m], alone.data(), alone.size()));
      same = same && BitEqual(grouped[m].data(), alone.data(), alone.size());
    }
  }
  Check(same, tag + ": each matrix of a grouped launch == its own launch bit for bit (n = 1, 7, 16, 24, 40)");
}

// ------------------------------------------------------------------ attention op

// One attention layer vs the CPU backend, with the attention kernel `kernel`
// (1 = FP32 shared-memory, 2 = tensor-core; F32 KV always runs 1): a prefill
// of `ctx` tokens fills the paged KV (block table in reverse pool order), then
// a k+1 = 7-token verify at positions ctx..ctx+6 (crossing 32-position chunk,
// 128-position split and 16-position block boundaries for the chosen ctx), 7
// single-token decodes of the same tokens, and a 16-token batch ending at
// ctx+6 (prefill-style tiles at other offsets).
struct AttnCase {
  GgmlType kvt;
  int H, KVH, HD, ctx;
};

void CheckAttentionOp(const AttnCase& c, int kernel) {
  SetAttn(kernel);
  const std::string tag = absl::StrFormat("attention v%d kv=%s %d/%d heads x %d, ctx %d", kernel,
                                          std::string(TypeName(c.kvt)), c.H, c.KVH, c.HD, c.ctx);
  const int T = c.ctx + 7;
  BackendOptions o;
  o.name = "cuda";
  o.cuda_graphs = false;
  auto gpu = CreateCudaBackend(o);
  CHECK_OK(gpu.status());
  CpuBackend cpu(0);
  KvLayout kv;
  kv.n_layers = 1;
  kv.n_kv_heads = c.KVH;
  kv.head_dim = c.HD;
  kv.block_size = 16;
  const int nb = (T + 15) / 16;
  kv.n_blocks = nb + 2;
  kv.type = c.kvt;
  CHECK_OK((*gpu)->InitKv(kv));
  CHECK_OK(cpu.InitKv(kv));
  std::vector<int32_t> blocks;
  for (int i = 0; i < nb; ++i) blocks.push_back(kv.n_blocks - 1 - i);
  Rng r(HashStr(tag) + 17);
  const size_t qn = static_cast<size_t>(T) * c.H * c.HD, kn = static_cast<size_t>(T) * c.KVH * c.HD;
  std::vector<float> q(qn), k(kn), v(kn);
  for (auto& x : q) x = r.Gauss() * 1.5f;  // moderately peaked softmax
  for (auto& x : k) x = r.Gauss();
  for (auto& x : v) x = r.Gauss();
  auto qd = (*gpu)->AllocActivations(qn);
  auto kd = (*gpu)->AllocActivations(kn);
  auto vd = (*gpu)->AllocActivations(kn);
  auto od = (*gpu)->AllocActivations(qn);
  CHECK_OK(od.status());
  CHECK_OK(qd.status());
  CHECK_OK(kd.status());
  CHECK_OK(vd.status());
  CUDA_OK(cudaMemcpy(*qd, q.data(), qn * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(*kd, k.data(), kn * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(*vd, v.data(), kn * 4, cudaMemcpyHostToDevice));
  const AttentionParams ap{0, c.H, c.KVH, c.HD, 1.0f / std::sqrt(static_cast<float>(c.HD))};
  auto run = [&](bool on_gpu, int p0, int n, std::vector<float>* res) -> absl::Status {
    Batch b;
    BatchSeq s;
    s.slot = 0;
    s.kv_len = p0 + n;
    s.blocks = blocks;
    b.seqs = {s};
    for (int i = 0; i < n; ++i) {
      b.tokens.push_back(0);
      b.pos.push_back(p0 + i);
      b.seq_index.push_back(0);
    }
    const size_t qo = static_cast<size_t>(p0) * c.H * c.HD, ko = static_cast<size_t>(p0) * c.KVH * c.HD;
    res->assign(static_cast<size_t>(n) * c.H * c.HD, 0.0f);
    if (on_gpu) {
      SPECD_RETURN_IF_ERROR((*gpu)->SetBatch(b));
      (*gpu)->Attention(*qd + qo, *kd + ko, *vd + ko, ap, *od + qo);
      return (*gpu)->ReadToHost(*od + qo, res->data(), res->size());
    }
    SPECD_RETURN_IF_ERROR(cpu.SetBatch(b));
    cpu.Attention(q.data() + qo, k.data() + ko, v.data() + ko, ap, res->data());
    return cpu.Synchronize();
  };
  std::vector<float> tmp, gv, cv, gd, cd;
  if (c.ctx > 0) {
    CHECK_OK(run(true, 0, c.ctx, &tmp));
    CHECK_OK(run(false, 0, c.ctx, &tmp));
  }
  CHECK_OK(run(true, c.ctx, 7, &gv));
  CHECK_OK(run(false, c.ctx, 7, &cv));
  const size_t row = static_cast<size_t>(c.H) * c.HD;
  double worst = 0;
  for (int i = 0; i < 7; ++i) worst = std::max(worst, RelErr(gv.data() + i * row, cv.data() + i * row, row));
  bool same = true;
  for (int i = 0; i < 7; ++i) {
    CHECK_OK(run(true, c.ctx + i, 1, &gd));
    CHECK_OK(run(false, c.ctx + i, 1, &cd));
    worst = std::max(worst, RelErr(gd.data(), cd.data(), row));
    same = same && BitEqual(gd.data(), gv.data() + i * row, row);
  }
  bool same16 = true;
  if (c.ctx >= 9) {
    CHECK_OK(run(true, c.ctx - 9, 16, &gd));
    same16 = BitEqual(gd.data() + 9 * row, gv.data(), 7 * row);
  }
  const double bound = 1e-4;
  Check(worst <= bound, absl::StrCat(tag, ": verify(7) and decode vs CPU, max rel err ", Fmt(worst), " (bound ",
                                     Fmt(bound), ")"));
  Check(same && same16, absl::StrCat(tag, ": decode == verify(7) == 16-token batch, bit for bit"));
  SetAttn(2);
}

// The producers that quantize what they write (RMSNorm with and without the
// residual add, and in place; SwiGLU) against the standalone pass on their
// float outputs: the same activation bytes; and their floats against a double
// reference. RMSNorm's counters must be back at zero after each launch.
void CheckFusedQuant() {
  Check(cuda::PrepareMiscKernels() == cudaSuccess, "PrepareMiscKernels");
  Rng rng(77);
  for (int dim : {5120, 17408, 2048, 3584, 200, 9000}) {
    // RMSNorm's groups a block (LaunchRmsNorm, H200 at dim 5120): 1 row and 3: one; 30 (six sequences'
    // verify): 3; 65: 5; 300: all of the row (a block per row).
    for (int rows : {1, 3, 30, 65, 300}) {
      if (rows >= 30 && dim != 5120 && dim != 9000) continue;
      const size_t n = static_cast<size_t>(rows) * dim;
      std::vector<float> x(n), add(n), w(dim), gate(n), up(n);
      for (auto& v : x) v = rng.Gauss();
      for (auto& v : add) v = rng.Gauss() * 0.5f;
      for (auto& v : w) v = 1.0f + 0.1f * rng.Gauss();
      for (auto& v : gate) v = rng.Gauss() * 2.0f;
      for (auto& v : up) v = rng.Gauss();
      const size_t xqb = cuda::XQuantBytes(rows, dim);
      float *dx, *dadd, *dw, *dout, *dg, *du;
      uint8_t *q1, *q2;
      int* cnt;
      CUDA_OK(cudaMalloc(&cnt, rows * sizeof(int)));
      CUDA_OK(cudaMemset(cnt, 0, rows * sizeof(int)));
      CUDA_OK(cudaMalloc(&dx, n * 4));
      CUDA_OK(cudaMalloc(&dadd, n * 4));
      CUDA_OK(cudaMalloc(&dw, dim * 4));
      CUDA_OK(cudaMalloc(&dout, n * 4));
      CUDA_OK(cudaMalloc(&dg, n * 4));
      CUDA_OK(cudaMalloc(&du, n * 4));
      CUDA_OK(cudaMalloc(&q1, xqb));
      CUDA_OK(cudaMalloc(&q2, xqb));
      CUDA_OK(cudaMemcpy(dadd, add.data(), n * 4, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemcpy(dw, w.data(), dim * 4, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemcpy(dg, gate.data(), n * 4, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemcpy(du, up.data(), n * 4, cudaMemcpyHostToDevice));
      std::vector<float> out(n), xa(n);
      std::vector<uint8_t> b1(xqb), b2(xqb);
      // Runs `produce` (writing dout and q1), then the standalone pass on dout into q2.
      auto quant_same = [&](auto produce) {
        CUDA_OK(cudaMemset(q1, 0, xqb));
        CUDA_OK(cudaMemset(q2, 0, xqb));
        CUDA_OK(produce());
        CUDA_OK(cuda::LaunchQuantizeX(dout, rows, dim, q2, nullptr));
        CUDA_OK(cudaDeviceSynchronize());
        CUDA_OK(cudaMemcpy(b1.data(), q1, xqb, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(b2.data(), q2, xqb, cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(out.data(), dout, n * 4, cudaMemcpyDeviceToHost));
        return b1 == b2;
      };
      const std::string shape = absl::StrCat(rows, " x ", dim);
      std::vector<float> out0;  // mode 0's output
      // mode 0: out apart; 1: + residual add; 2: in place (out == x).
      for (int mode : {0, 1, 2}) {
        const bool with_add = mode == 1;
        CUDA_OK(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice));
        const bool same = quant_same([&] {
          if (mode == 2) {
            const cudaError_t e = cuda::LaunchRmsNorm(dx, nullptr, dw, 1e-6f, rows, dim, dx, q1, cnt, nullptr);
            return e != cudaSuccess ? e : cudaMemcpyAsync(dout, dx, n * 4, cudaMemcpyDeviceToDevice, nullptr);
          }
          return cuda::LaunchRmsNorm(dx, with_add ? dadd : nullptr, dw, 1e-6f, rows, dim, dout, q1, cnt, nullptr);
        });
        if (mode == 0) out0 = out;
        if (mode == 2) CUDA_OK(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice));  // x itself is checked below
        CUDA_OK(cudaMemcpy(xa.data(), dx, n * 4, cudaMemcpyDeviceToHost));
        std::vector<int> cnt_after(rows, -1);
        CUDA_OK(cudaMemcpy(cnt_after.data(), cnt, rows * sizeof(int), cudaMemcpyDeviceToHost));
        const bool cnt_zero = std::all_of(cnt_after.begin(), cnt_after.end(), [](int c) { return c == 0; });
        double worst = 0;
        bool sum_ok = true;
        for (int r = 0; r < rows; ++r) {
          double ss = 0;
          for (int i = 0; i < dim; ++i) {
            const size_t j = static_cast<size_t>(r) * dim + i;
            const float v = with_add ? x[j] + add[j] : x[j];
            sum_ok = sum_ok && xa[j] == v;
            ss += static_cast<double>(v) * v;
          }
          const double sc = 1.0 / std::sqrt(ss / dim + 1e-6);
          for (int i = 0; i < dim; ++i) {
            const size_t j = static_cast<size_t>(r) * dim + i;
            const double ref = (with_add ? x[j] + add[j] : x[j]) * sc * w[i];
            worst = std::max(worst, std::fabs(out[j] - ref) / (std::fabs(ref) + 1e-3));
          }
        }
        Check(same && sum_ok && cnt_zero && worst < 1e-5,
              absl::StrCat("RMSNorm", mode == 1 ? " + residual add" : mode == 2 ? " in place" : "", " ", shape,
                           ": activation bytes == the standalone quantization of its output (", same ? "yes" : "NO",
                           "), residual exact (", sum_ok ? "yes" : "NO", "), counters back at zero (",
                           cnt_zero ? "yes" : "NO", "), rel err vs double ", Fmt(worst)));
      }
      if (rows > 1) {
        // However many groups a block the launch took, a row comes out as it does alone.
        const size_t last = static_cast<size_t>(rows - 1) * dim;
        CUDA_OK(cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice));
        CUDA_OK(cuda::LaunchRmsNorm(dx + last, nullptr, dw, 1e-6f, 1, dim, dout, nullptr, cnt, nullptr));
        CUDA_OK(cudaDeviceSynchronize());
        std::vector<float> alone(dim);
        CUDA_OK(cudaMemcpy(alone.data(), dout, dim * 4, cudaMemcpyDeviceToHost));
        Check(BitEqual(alone.data(), out0.data() + last, dim),
              absl::StrCat("RMSNorm ", shape, ": the last row == that row alone, bit for bit"));
      }
      const bool same = quant_same([&] { return cuda::LaunchSwiGLU(dg, du, rows, dim, dout, q1, nullptr); });
      double worst = 0;
      for (size_t j = 0; j < n; ++j) {
        const double g = gate[j], ref = g / (1.0 + std::exp(-g)) * up[j];
        worst = std::max(worst, std::fabs(out[j] - ref) / (std::fabs(ref) + 1e-3));
      }
      Check(same && worst < 1e-5, absl::StrCat("SwiGLU ", shape, ": activation bytes == the standalone quantization of "
                                               "its output (", same ? "yes" : "NO", "), rel err vs double ", Fmt(worst)));
      for (void* p : {static_cast<void*>(cnt), static_cast<void*>(dx), static_cast<void*>(dadd), static_cast<void*>(dw),
                      static_cast<void*>(dout), static_cast<void*>(dg), static_cast<void*>(du),
                      static_cast<void*>(q1), static_cast<void*>(q2)})
        CUDA_OK(cudaFree(p));
    }
  }
}

void CheckAttentionOps(bool quick) {
  const GgmlType F16 = GgmlType::F16, Q8 = GgmlType::Q8_0;
  std::vector<AttnCase> cases = {
      {F16, 16, 2, 128, 0},   {F16, 16, 2, 128, 29},  {F16, 16, 2, 128, 121}, {F16, 16, 2, 128, 509},
      {Q8, 16, 2, 128, 121},  {Q8, 16, 2, 128, 250},  {F16, 8, 2, 64, 250},   {F16, 10, 2, 64, 121},
      {Q8, 4, 4, 32, 29},     {F16, 32, 2, 64, 121},  {F16, 48, 1, 64, 121},  {F16, 8, 1, 256, 121},
      {GgmlType::F32, 16, 2, 128, 121}, {F16, 32, 8, 96, 250}};  // 96: groups of 256 start inside heads
  if (quick) cases = {{F16, 16, 2, 128, 121}, {Q8, 16, 2, 128, 250}};
  for (int kernel : {2, 1})
    for (const AttnCase& c : cases) CheckAttentionOp(c, kernel);
  SetAttn(2);
}

// v3 (cp.async ring) against v2 (register streaming), bit for bit: the same
// arithmetic reading the same bytes, so every column of every n = 1..16 must
// match, at every ring depth. Weights generated on the device (valid blocks).
// ------------------------------------------------------------------ IPC and acceptance

int IpcChild(const char* hex) {
  std::string h;
  for (size_t i = 0; hex[i] && hex[i + 1]; i += 2) h.push_back(static_cast<char>(std::stoi(std::string(hex + i, 2), nullptr, 16)));
  auto p = cuda_ipc::Open(h, 0);
  if (!p.ok()) {
    std::fprintf(stderr, "child: %s\n", p.status().ToString().c_str());
    return 3;
  }
  std::vector<float> v(1024);
  if (cudaMemcpy(v.data(), *p, 4096, cudaMemcpyDeviceToHost) != cudaSuccess) return 4;
  for (int i = 0; i < 1024; ++i)
    if (v[i] != static_cast<float>(i) * 0.5f) return 5;
  for (auto& x : v) x = -x;
  if (cudaMemcpy(*p, v.data(), 4096, cudaMemcpyHostToDevice) != cudaSuccess) return 6;
  return cuda_ipc::Close(*p).ok() ? 0 : 7;
}

void CheckIpc(const char* self) {
  auto buf = cuda_ipc::Create(4096, 0);
  CHECK_OK(buf.status());
  std::vector<float> v(1024);
  for (int i = 0; i < 1024; ++i) v[i] = static_cast<float>(i) * 0.5f;
  CUDA_OK(cudaMemcpy(buf->ptr, v.data(), 4096, cudaMemcpyHostToDevice));
  std::string hex;
  for (unsigned char c : buf->handle) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", c);
    hex += b;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    execl(self, self, "--ipc-child", hex.c_str(), static_cast<char*>(nullptr));
    _exit(9);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  CUDA_OK(cudaMemcpy(v.data(), buf->ptr, 4096, cudaMemcpyDeviceToHost));
  bool neg = true;
  for (int i = 0; i < 1024; ++i) neg = neg && v[i] == -static_cast<float>(i) * 0.5f;
  Check(rc == 0 && neg, absl::StrCat("CUDA IPC: another process opened the exported buffer, read and wrote it (child rc ",
                                     rc, ")"));
  CHECK_OK(cuda_ipc::Destroy(&*buf));
}

// ---- weights shared between processes (common/engine/weight_sharing.h) ----

EngineOptions ShareOpts(const std::string& model, EngineOptions::ShareWeights share, const std::string& registry) {
  EngineOptions o;
  o.model_path = model;
  o.backend.name = "cuda";
  o.max_seqs = 1;
  o.max_seq_len = 256;
  o.max_batch_tokens = 32;
  o.device_registry = registry;
  o.share_weights = share;
  o.role = share == EngineOptions::ShareWeights::kExport ? "target" : "draft";
  return o;
}

// A 12-token prefill's logits, then 4 greedy decode steps' (every row).
absl::StatusOr<std::vector<float>> ShareLogits(Engine& e) {
  std::vector<float> out;
  SPECD_RETURN_IF_ERROR(e.NewSequence(0));
  std::vector<int32_t> tokens = {1, 5, 9, 300, 17, 2000, 31, 4, 77, 12345, 8, 99};
  SPECD_RETURN_IF_ERROR(e.Run({Engine::Feed{0, tokens, static_cast<int>(tokens.size())}}, &out));
  for (int i = 0; i < 4; ++i) {
    const int V = e.vocab_size();
    const int32_t next = static_cast<int32_t>(
        std::max_element(out.end() - V, out.end()) - (out.end() - V));
    SPECD_RETURN_IF_ERROR(e.Run({Engine::Feed{0, {next}, 1}}, &out));
  }
  e.Release(0);
  return out;
}

// The child: maps the draft's tensors from the parent's export through CUDA
// IPC and writes its logits to `out`.
int ShareChild(const char* registry, const char* draft, const char* out) {
  auto e = Engine::Create(ShareOpts(draft, EngineOptions::ShareWeights::kImport, registry));
  if (!e.ok()) {
    std::fprintf(stderr, "child: %s\n", e.status().ToString().c_str());
    return 2;
  }
  std::printf("child: %s; own weights %zu bytes on the device\n", (*e)->weight_sharing().c_str(),
              (*e)->backend()->Memory().weights);
  if ((*e)->ledger().shared == 0 || (*e)->backend()->Memory().weights != 0) return 3;
  if ((*e)->weight_sharing().find("CUDA IPC mapping") == std::string::npos) return 4;
  auto l = ShareLogits(**e);
  if (!l.ok()) return 5;
  std::ofstream f(out, std::ios::binary);
  f.write(reinterpret_cast<const char*>(l->data()), static_cast<std::streamsize>(l->size() * sizeof(float)));
  return f ? 0 : 6;
}

void CheckWeightSharing(const char* self) {
  using Share = EngineOptions::ShareWeights;
  char tmpl[] = "/tmp/specd-share-check-XXXXXX";
  const char* dir = mkdtemp(tmpl);
  if (!dir) {
    Check(false, "weight sharing: mkdtemp");
    return;
  }
  const std::string d = dir, target = d + "/target.gguf", draft = d + "/draft.gguf", reg = d + "/registry";
  GenOptions g;
  auto shape = PresetShape("small");
  CHECK_OK(shape.status());
  g.shape = *shape;
  g.shape.vocab_size = 32000;
  g.weight_type = "Q4_K_M";
  CHECK_OK(GenerateModel(g, target));
  DeriveOptions dv;
  dv.layers = 2;
  CHECK_OK(DeriveDraft(target, dv, draft));
  {
    auto t = Engine::Create(ShareOpts(target, Share::kExport, reg));
    CHECK_OK(t.status());
    const WeightExport* x = (*t)->exported();
    Check(x && x->kind == "cuda-ipc" && x->tensors.size() == (*t)->file().tensors().size(),
          absl::StrCat("weight sharing: the target exports its weights (", (*t)->weight_sharing(), ")"));
    auto own = Engine::Create(ShareOpts(draft, Share::kOff, "off"));
    CHECK_OK(own.status());
    auto ref = ShareLogits(**own);
    CHECK_OK(ref.status());
    const size_t own_bytes = (*own)->backend()->Memory().weights;
    auto shared = Engine::Create(ShareOpts(draft, Share::kImport, reg));
    CHECK_OK(shared.status());
    Check((*shared)->ledger().shared == own_bytes && (*shared)->ledger().weights == 0 &&
              (*shared)->backend()->Memory().weights == 0,
          absl::StrCat("weight sharing: the draft maps all ", own_bytes, " bytes of its weights in this process, holds "
                       "none (", (*shared)->weight_sharing(), ")"));
    auto got = ShareLogits(**shared);
    CHECK_OK(got.status());
    Check(got->size() == ref->size() && BitEqual(got->data(), ref->data(), ref->size()),
          "weight sharing: same-process mapped draft == own-copy draft, logits bit for bit");
    shared->reset();
    // Another process, through CUDA IPC.
    const std::string out = d + "/child.bin";
    const pid_t pid = fork();
    if (pid == 0) {
      execl(self, self, "--share-child", reg.c_str(), draft.c_str(), out.c_str(), static_cast<char*>(nullptr));
      _exit(9);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::vector<float> child(ref->size());
    std::ifstream f(out, std::ios::binary);
    f.read(reinterpret_cast<char*>(child.data()), static_cast<std::streamsize>(child.size() * sizeof(float)));
    Check(rc == 0 && f.gcount() == static_cast<std::streamsize>(child.size() * sizeof(float)) &&
              BitEqual(child.data(), ref->data(), ref->size()),
          absl::StrCat("weight sharing: a draft in another process maps the target's weights through CUDA IPC, holds "
                       "none, and computes the own-copy logits bit for bit (child rc ",
                       rc, ")"));
  }
  std::error_code ec;
  std::filesystem::remove_all(d, ec);
}

void CheckAcceptance() {
  const int V = 3000, k = 5;
  int same = 0, trials = 0;
  Rng r(99);
  float *pd = nullptr, *qd = nullptr;
  int32_t* xd = nullptr;
  CUDA_OK(cudaMalloc(&pd, sizeof(float) * (k + 1) * V));
  CUDA_OK(cudaMalloc(&qd, sizeof(float) * k * V));
  CUDA_OK(cudaMalloc(&xd, sizeof(int32_t) * k));
  for (int trial = 0; trial < 300; ++trial) {
    // Sparse-ish distributions; q close to p so that acceptance varies.
    std::vector<float> p((k + 1) * V, 0.0f), q(k * V, 0.0f);
    for (int i = 0; i <= k; ++i) {
      double s = 0;
      for (int j = 0; j < V; ++j) {
        if (r.U() < 0.05) p[i * V + j] = static_cast<float>(r.U() * r.U());
        s += p[i * V + j];
      }
      for (int j = 0; j < V; ++j) p[i * V + j] = static_cast<float>(p[i * V + j] / s);
      if (i < k) {
        double t = 0;
        for (int j = 0; j < V; ++j) {
          q[i * V + j] = p[i * V + j] * static_cast<float>(0.5 + r.U()) + (r.U() < 0.01 ? 0.01f : 0.0f);
          t += q[i * V + j];
        }
        for (int j = 0; j < V; ++j) q[i * V + j] = static_cast<float>(q[i * V + j] / t);
      }
    }
    std::vector<int32_t> props(k);
    for (int i = 0; i < k; ++i) {
      // Mostly tokens in p's support.
      int32_t x = r.Int(V);
      for (int tries = 0; tries < 50 && p[i * V + x] == 0.0f; ++tries) x = r.Int(V);
      props[i] = x;
    }
    std::vector<TokenDist> dists(k + 1);
    for (int i = 0; i <= k; ++i)
      for (int j = 0; j < V; ++j)
        if (p[i * V + j] > 0) {
          dists[i].ids.push_back(j);
          dists[i].probs.push_back(p[i * V + j]);
        }
    const uint64_t seed = r.Next();
    const int64_t pos0 = r.Int(1000);
    const AcceptResult want = VerifyProposals(dists, q.data(), props.data(), k, V, seed, pos0);
    CUDA_OK(cudaMemcpy(pd, p.data(), p.size() * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(qd, q.data(), q.size() * 4, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(xd, props.data(), props.size() * 4, cudaMemcpyHostToDevice));
    auto got = cuda_ipc::VerifyOnDevice(pd, qd, xd, k, V, seed, pos0);
    CHECK_OK(got.status());
    ++trials;
    same += got->n_accepted == want.n_accepted && got->next_token == want.next_token && got->bonus == want.bonus;
  }
  cudaFree(pd);
  cudaFree(qd);
  cudaFree(xd);
  Check(same == trials, absl::StrCat("device acceptance rule == VerifyProposals in ", same, "/", trials, " trials"));
}

// ------------------------------------------------------------------ speculative steps on the device

// Logits rows that exercise the sampler: a spread, ties, -inf, NaN and a peak.
std::vector<float> SamplerRows(Rng& r, int rows, int V) {
  std::vector<float> l(static_cast<size_t>(rows) * V);
  for (int i = 0; i < rows; ++i) {
    float* row = l.data() + static_cast<size_t>(i) * V;
    const float scale = 1.0f + static_cast<float>(i % 4);
    for (int j = 0; j < V; ++j) row[j] = r.Gauss() * scale;
    for (int t = 0; t < V / 50; ++t) row[r.Int(V)] = 1.5f * scale;  // ties
    for (int t = 0; t < V / 100; ++t) row[r.Int(V)] = -INFINITY;
    if (i % 3 == 0) row[r.Int(V)] = NAN;
    if (i % 2 == 0) row[r.Int(V)] = 8.0f * scale;  // a peak
    if (i == 5) row[r.Int(V)] = INFINITY;          // the sampler's fallback: that token, probability 1
  }
  return l;
}

std::vector<std::pair<std::string, SamplingParams>> SamplerCases() {
  std::vector<std::pair<std::string, SamplingParams>> c;
  auto add = [&](const std::string& name, float t, int k, float p, float min_p, float pen) {
    SamplingParams s;
    s.temperature = t;
    s.top_k = k;
    s.top_p = p;
    s.min_p = min_p;
    s.repetition_penalty = pen;
    s.repetition_window = 48;
    s.seed = HashStr(name);
    c.push_back({name, s});
  };
  add("greedy", 0, 0, 1, 0, 1);
  add("greedy+penalty", 0, 0, 1, 0, 1.3f);
  add("T=0.7", 0.7f, 0, 1, 0, 1);
  add("T=1 top-k 40", 1, 40, 1, 0, 1);
  add("T=0.8 top-p 0.9", 0.8f, 0, 0.9f, 0, 1);
  add("T=1 top-k 50 top-p 0.95", 1, 50, 0.95f, 0, 1);
  add("T=0.9 min-p 0.05", 0.9f, 0, 1, 0.05f, 1);
  add("T=1.3 top-p 0.99 min-p 0.02", 1.3f, 0, 0.99f, 0.02f, 1);
  add("T=0.8 top-p 0.9 penalty 1.2", 0.8f, 0, 0.9f, 0, 1.2f);
  return c;
}

// Host data in a buffer of `be` (backend memory).
template <class T>
absl::StatusOr<T*> Upload(Backend* be, const std::vector<T>& host) {
  SPECD_ASSIGN_OR_RETURN(void* d, be->AllocBuffer(std::max<size_t>(host.size(), 1) * sizeof(T)));
  if (!host.empty()) SPECD_RETURN_IF_ERROR(be->WriteBytes(host.data(), d, host.size() * sizeof(T)));
  return static_cast<T*>(d);
}

void CheckDeviceSampler() {
  OpEnv dev;  // a CUDA backend with a current batch (the ops record against it)
  CHECK_OK(dev.Init());
  CpuBackend& cpu = dev.cpu;
  Rng r(2024);
  constexpr int kRows = 6, kDraws = 6;
  for (int V : {5000, 151936}) {
    const std::vector<float> logits = SamplerRows(r, kRows, V);
    // The penalty window: 16 tokens on the host, then 4 "sampled earlier" in backend memory.
    std::vector<int32_t> recent(16), earlier(4);
    for (auto& t : recent) t = r.Int(V);
    for (auto& t : earlier) t = r.Int(V);
    recent[3] = recent[9];  // a repeat: penalized once
    auto l_dev = Upload(dev.gpu.get(), logits);
    auto earlier_dev = Upload(dev.gpu.get(), earlier);
    auto out_dev = Upload(dev.gpu.get(), std::vector<float>(static_cast<size_t>(kRows) * (V + 2), 0.0f));
    CHECK_OK(l_dev.status());
    CHECK_OK(earlier_dev.status());
    CHECK_OK(out_dev.status());
    for (const auto& [name, params] : SamplerCases()) {
      int tokens = 0, same = 0;
      double prob_err = 0, conf_err = 0;
      for (int d = 0; d < kDraws; ++d) {
        // Device and host: the same rows, the same random numbers.
        std::vector<float> host_l = logits, host_out(static_cast<size_t>(kRows) * (V + 2), 0.0f);
        std::vector<SampleRow> on_dev(kRows), on_host(kRows);
        for (int i = 0; i < kRows; ++i) {
          for (auto* row : {&on_dev[i], &on_host[i]}) {
            row->row = i;
            row->params = params;
            row->stream = kRngDraft;
            row->counter = static_cast<uint64_t>(1000 * d + i);
            row->recent = recent;
            row->n_recent_dev = static_cast<int>(earlier.size());
          }
          float* od = *out_dev + static_cast<size_t>(i) * (V + 2);
          float* oh = host_out.data() + static_cast<size_t>(i) * (V + 2);
          on_dev[i].recent_dev = *earlier_dev;
          on_host[i].recent_dev = earlier.data();
          on_dev[i].token = reinterpret_cast<int32_t*>(od);
          on_host[i].token = reinterpret_cast<int32_t*>(oh);
          on_dev[i].confidence = od + 1;
          on_host[i].confidence = oh + 1;
          on_dev[i].probs = od + 2;
          on_host[i].probs = oh + 2;
        }
        CHECK_OK(dev.gpu->WriteBytes(logits.data(), *l_dev, logits.size() * sizeof(float)));  // rows are penalized in place
        dev.gpu->Sample(*l_dev, V, on_dev);
        std::vector<float> got(host_out.size());
        CHECK_OK(dev.gpu->ReadBytes(*out_dev, got.data(), got.size() * sizeof(float)));
        cpu.Sample(host_l.data(), V, on_host);
        for (int i = 0; i < kRows; ++i) {
          const float* g = got.data() + static_cast<size_t>(i) * (V + 2);
          const float* h = host_out.data() + static_cast<size_t>(i) * (V + 2);
          ++tokens;
          same += std::memcmp(g, h, sizeof(int32_t)) == 0;
          if (std::memcmp(g, h, sizeof(int32_t)) != 0 && d == 0) {  // what differs, once per row
            int32_t gt = 0, ht = 0;
            std::memcpy(&gt, g, sizeof gt);
            std::memcpy(&ht, h, sizeof ht);
            const float* lr = logits.data() + static_cast<size_t>(i) * V;
            // The row as the device holds it after the op (greedy rows are not
            // changed in place): tells a wrong reduction from wrong data.
            float dev_at_host = NAN;
            if (ht >= 0 && ht < V)
              (void)dev.gpu->ReadBytes(*l_dev + static_cast<size_t>(i) * V + ht, &dev_at_host, sizeof(float));
            std::printf("  V=%d %s row %d: device token %d (logit %.9g), host token %d (logit %.9g; %.9g in device "
                        "memory)\n",
                        V, name.c_str(), i, gt, gt >= 0 && gt < V ? lr[gt] : NAN, ht, ht >= 0 && ht < V ? lr[ht] : NAN,
                        dev_at_host);
          }
          conf_err = std::max(conf_err, std::fabs(static_cast<double>(g[1]) - h[1]) / std::max(1e-6, std::fabs(static_cast<double>(h[1]))));
          for (int j = 0; j < V; ++j) prob_err = std::max(prob_err, std::fabs(static_cast<double>(g[2 + j]) - h[2 + j]));
        }
      }
      Check(same == tokens && prob_err <= 1e-6 && conf_err <= 1e-4,
            absl::StrCat("CUDA Sample (", SamplingMode(), ") == CPU sampler, V=", V, ", ", name, ": tokens ", same, "/", tokens,
                         ", max prob diff ", Fmt(prob_err), ", max confidence rel diff ", Fmt(conf_err)));
    }
  }
}

void CheckDeviceAccept() {
  OpEnv dev;
  CHECK_OK(dev.Init());
  CpuBackend& cpu = dev.cpu;
  Rng r(77);
  constexpr int kMaxK = 7;
  for (int V : {3000, 151936}) {
    // Buffers for the largest k, reused by every trial.
    auto t_dev = Upload(dev.gpu.get(), std::vector<float>(static_cast<size_t>(kMaxK + 1) * V));
    auto q_dev = Upload(dev.gpu.get(), std::vector<float>(static_cast<size_t>(kMaxK) * V));
    auto out_dev = Upload(dev.gpu.get(), std::vector<int32_t>(4));
    CHECK_OK(t_dev.status());
    CHECK_OK(q_dev.status());
    CHECK_OK(out_dev.status());
    for (const auto& [name, params] : SamplerCases()) {
      int trials = 0, same = 0;
      for (int trial = 0; trial < (V > 10000 ? 6 : 24); ++trial) {
        const int k = 1 + r.Int(kMaxK);
        const bool one_hot = trial % 3 == 0;
        const std::vector<float> target = SamplerRows(r, k + 1, V);
        // The draft: its own rows, sampled by the CPU sampler (its q rows and tokens).
        const std::vector<float> draft = SamplerRows(r, k, V);
        std::vector<float> q(static_cast<size_t>(k) * V, 0.0f);
        std::vector<int32_t> proposals(k), recent(8);
        for (auto& t : recent) t = r.Int(V);
        std::vector<int32_t> ctx = recent;
        for (int i = 0; i < k; ++i) {
          TokenDist dist;
          ProcessLogits(draft.data() + static_cast<size_t>(i) * V, V, params, ctx, &dist);
          for (size_t j = 0; j < dist.ids.size(); ++j) q[static_cast<size_t>(i) * V + dist.ids[j]] = dist.probs[j];
          // Half the time the target's own top token, so that acceptance runs deep.
          proposals[i] = one_hot ? (r.U() < 0.5 ? Argmax(target.data() + static_cast<size_t>(i) * V, V) : r.Int(V))
                                 : SampleDist(dist, Uniform01(params.seed, kRngDraft, static_cast<uint64_t>(trial * 64 + i)));
          ctx.push_back(proposals[i]);
        }
        CHECK_OK(dev.gpu->WriteBytes(target.data(), *t_dev, target.size() * sizeof(float)));
        CHECK_OK(dev.gpu->WriteBytes(q.data(), *q_dev, q.size() * sizeof(float)));
        AcceptRows a;
        a.k = k;
        a.params = params;
        a.params.seed = r.Next();
        a.pos0 = r.Int(4000);
        a.recent = recent;
        a.proposals = proposals;
        std::vector<int32_t> want(4, -7), got(4);
        std::vector<float> host_t = target;
        AcceptRows ah = a;
        ah.q = one_hot ? nullptr : q.data();
        ah.out = want.data();
        cpu.Accept(host_t.data(), V, {ah});
        a.q = one_hot ? nullptr : *q_dev;
        a.out = *out_dev;
        dev.gpu->Accept(*t_dev, V, {a});
        CHECK_OK(dev.gpu->ReadBytes(*out_dev, got.data(), got.size() * sizeof(int32_t)));
        ++trials;
        same += got[0] == want[0] && got[1] == want[1] && got[2] == want[2];
      }
      Check(same == trials, absl::StrCat("CUDA Accept (", SamplingMode(), ") == CPU acceptance, V=", V, ", ", name, ": ", same, "/",
                                         trials, " trials (dense and one-hot q)"));
    }
  }
}

// Generated models (with a tokenizer) on the CUDA backend.
struct DevicePair {
  std::string dir;
  std::unique_ptr<Engine> target, draft;
  absl::Status Make(int vocab, int max_batch_tokens = 64, const char* preset = "tiny", const char* type = "Q8_0") {
    char tmpl[] = "/tmp/specd-gpu-spec-XXXXXX";
    if (!mkdtemp(tmpl)) return absl::InternalError("mkdtemp failed");
    dir = tmpl;
    GenOptions g;
    SPECD_ASSIGN_OR_RETURN(g.shape, PresetShape(preset));
    g.shape.vocab_size = vocab;
    g.weight_type = type;
    g.name = "gpu-spec-target";
    SPECD_RETURN_IF_ERROR(GenerateModel(g, dir + "/target.gguf"));
    DeriveOptions d;
    d.layers = 1;
    d.name = "gpu-spec-draft";
    SPECD_RETURN_IF_ERROR(DeriveDraft(dir + "/target.gguf", d, dir + "/draft.gguf"));
    EngineOptions o;
    o.backend.name = "cuda";
    o.backend.cuda_device_sampling = g_device_sampling;
    o.max_seqs = 6;
    o.max_seq_len = std::max(512, 2 * max_batch_tokens);
    o.max_batch_tokens = max_batch_tokens;
    o.model_path = dir + "/target.gguf";
    SPECD_ASSIGN_OR_RETURN(target, Engine::Create(o));
    o.model_path = dir + "/draft.gguf";
    SPECD_ASSIGN_OR_RETURN(draft, Engine::Create(o));
    return absl::OkStatus();
  }
  ~DevicePair() {
    if (!dir.empty()) std::system(("rm -rf '" + dir + "'").c_str());
  }
};

// Tokens sampled one forward at a time on `e`, the logits read to the host
// and sampled by the CPU sampler: what a proposal must equal. q: dense rows.
absl::Status HostProposal(Engine& e, const std::vector<int32_t>& prompt, const SamplingParams& sp, int k,
                          std::vector<int32_t>* tokens, std::vector<float>* q) {
  constexpr int32_t kSeq = 40;
  SPECD_RETURN_IF_ERROR(e.NewSequence(kSeq));
  const int V = e.vocab_size();
  std::vector<int32_t> ctx = prompt;
  Engine::Feed f{kSeq, prompt, 1, {}};
  std::vector<float> logits;
  TokenDist dist;
  absl::Status st;
  for (int i = 0; i < k && st.ok(); ++i) {
    logits.clear();
    st = e.Run({f}, &logits);
    if (!st.ok()) break;
    ProcessLogits(logits.data(), V, sp, ctx, &dist);
    const int32_t x = sp.greedy() ? dist.ids[0]
                                  : SampleDist(dist, Uniform01(sp.seed, kRngDraft, prompt.size() + static_cast<size_t>(i)));
    tokens->push_back(x);
    q->resize(q->size() + static_cast<size_t>(V), 0.0f);
    for (size_t j = 0; j < dist.ids.size(); ++j) (*q)[q->size() - V + static_cast<size_t>(dist.ids[j])] = dist.probs[j];
    ctx.push_back(x);
    f.tokens = {x};
  }
  e.Release(kSeq);
  return st;
}

std::vector<int32_t> HostGreedy(Engine& e, const std::vector<int32_t>& prompt, int n) {
  std::vector<int32_t> tokens;
  std::vector<float> q;
  if (!HostProposal(e, prompt, SamplingParams{}, n, &tokens, &q).ok()) return {};
  return tokens;
}

void CheckDeviceSpeculation() {
  DevicePair pair;
  CHECK_OK(pair.Make(4000));
  Rng r(5150);
  auto draft = LocalDraft::Create(pair.draft.get(), 8, "cuda");
  CHECK_OK(draft.status());
  Check((*draft)->exchange().kind() == "cuda", "LocalDraft on CUDA exports device rows: " + (*draft)->exchange_path());
  // 1. The device-resident proposal == the proposal sampled on the host from
  //    the same engine's logits (tokens; q rows through the host rows).
  LocalTarget host_reader(pair.target.get());
  host_reader.set_prefer_host(true);  // asks the draft for host rows: the q rows become readable here
  CHECK_OK(host_reader.Attach((*draft)->exchange().kind(), (*draft)->exchange().name()));
  auto reader = ExchangeBuffer::Attach("posix", (*draft)->exchange().name());
  CHECK_OK(reader.status());
  int cases = 0, same = 0;
  double q_err = 0;
  for (const auto& [name, sp] : SamplerCases()) {
    std::vector<int32_t> prompt(20);
    for (auto& t : prompt) t = r.Int(4000);
    std::vector<int32_t> want;
    std::vector<float> want_q;
    CHECK_OK(HostProposal(*pair.draft, prompt, sp, 8, &want, &want_q));
    CHECK_OK((*draft)->OpenSeq(1, prompt, sp));
    auto p = (*draft)->Propose({1, static_cast<int64_t>(prompt.size()), {}, 8, 0.0f, true}, kNoDeadline);
    CHECK_OK(p.status());
    ++cases;
    same += p->tokens == want;
    if (!sp.greedy() && p->tokens == want) {
      std::vector<float> q;
      CHECK_OK((*reader)->Read(p->ref, 1, p->tokens, &q));
      for (size_t j = 0; j < q.size() && j < want_q.size(); ++j)
        q_err = std::max(q_err, std::fabs(static_cast<double>(q[j]) - want_q[j]));
    }
    if (p->tokens != want) std::printf("  %s: device proposal differs from the host's\n", name.c_str());
    (*draft)->ReleaseSeq(1);
  }
  Check(same == cases && q_err <= 1e-6, absl::StrCat("CUDA proposal (", SamplingMode(), ") == host-sampled proposal: ", same, "/",
                                                     cases, " sampling settings, q rows max diff ", Fmt(q_err)));
  // 2. Greedy speculation on the device path == greedy target-only.
  LocalTarget target(pair.target.get());
  CHECK_OK(target.Attach((*draft)->exchange().kind(), (*draft)->exchange().name()));
  Check(target.exchange_path().rfind("device", 0) == 0, "target on CUDA maps the device rows: " + target.exchange_path());
  int runs = 0, lossless = 0;
  int64_t accepted = 0, proposed = 0;
  for (int pr = 0; pr < 4; ++pr) {
    std::vector<int32_t> prompt(8 + 5 * pr);
    for (auto& t : prompt) t = r.Int(4000);
    const std::vector<int32_t> ref = HostGreedy(*pair.target, prompt, 40);
    for (int k : {1, 3, 6, 8}) {
      SpecRequest req;
      req.seq = 2;
      req.prompt = prompt;
      req.max_tokens = 40;
      req.ignore_eos = true;
      req.k = k;
      const SpecResult res = RunSpeculative(req, pair.target->tokenizer(), target, draft->get(), {});
      ++runs;
      lossless += res.status.ok() && res.tokens == ref;
      accepted += res.stats.accepted;
      proposed += res.stats.proposed;
    }
  }
  Check(lossless == runs && target.path_counts().one_hot > 0,
        absl::StrCat("greedy speculation on the CUDA path (", SamplingMode(), ") == greedy target-only: ", lossless, "/", runs,
                     " runs, acceptance ", accepted, "/", proposed));
  // 3. Sampled speculation: the device rows decide as the host rows do.
  int s_runs = 0, s_same = 0;
  for (const auto& [name, sp] : SamplerCases()) {
    if (sp.greedy()) continue;
    std::vector<int32_t> prompt(12);
    for (auto& t : prompt) t = r.Int(4000);
    SpecRequest req;
    req.seq = 3;
    req.prompt = prompt;
    req.sampling = sp;
    req.max_tokens = 32;
    req.ignore_eos = true;
    req.k = 4;
    const SpecResult on_device = RunSpeculative(req, pair.target->tokenizer(), target, draft->get(), {});
    const SpecResult on_host = RunSpeculative(req, pair.target->tokenizer(), host_reader, draft->get(), {});
    ++s_runs;
    s_same += on_device.status.ok() && on_host.status.ok() && on_device.tokens == on_host.tokens &&
              on_device.stats.draft_failures == 0;
  }
  Check(s_same == s_runs && target.path_counts().device > 0 && host_reader.path_counts().host > 0,
        absl::StrCat("sampled speculation: device rows == host rows in ", s_same, "/", s_runs, " settings (device steps ",
                     target.path_counts().device, ", host steps ", host_reader.path_counts().host, ")"));
}

// The first requests after the warm-up replay the warm-up's graphs. The
// warm-up's prompt is the largest forward (512 tokens: the F16 GEMM); a
// 22-token prompt is the first wide (17..64-column) matvec batch and a
// 100-token one the first quantized prompt GEMM. A buffer sized by them
// grew and dropped every graph (round 38: the first adaptive request
// captured 10 graphs again).
void CheckWarmupKeepsGraphs() {
  DevicePair pair;
  CHECK_OK(pair.Make(4000, 512, "small", "Q4_K"));
  auto draft = LocalDraft::Create(pair.draft.get(), 8, "cuda");
  CHECK_OK(draft.status());
  LocalTarget target(pair.target.get());
  CHECK_OK(target.Attach((*draft)->exchange().kind(), (*draft)->exchange().name()));
  WarmupOptions w;
  w.seq = 4;
  w.k_max = 4;
  w.max_context = 1024;
  w.prompt_tokens = 512;
  const WarmupReport rep = WarmUp(pair.target->tokenizer(), target, draft->get(), w);
  CHECK_OK(rep.status);
  auto stats = [&] {
    return std::array<CudaBackendControl::Stats, 2>{AsCudaControl(pair.target->backend())->GetStats(),
                                                    AsCudaControl(pair.draft->backend())->GetStats()};
  };
  Rng r(2238);
  for (const int prompt : {22, 100}) {
    const auto before = stats();
    SpecRequest req;
    req.seq = 5;
    req.prompt.resize(prompt);
    for (auto& t : req.prompt) t = r.Int(4000);
    req.max_tokens = 40;
    req.ignore_eos = true;
    req.k = 3;
    const SpecResult res = RunSpeculative(req, pair.target->tokenizer(), target, draft->get(), {});
    const auto after = stats();
    const int64_t drops = after[0].graph_drops - before[0].graph_drops + after[1].graph_drops - before[1].graph_drops;
    const int64_t captures = after[0].graph_captures - before[0].graph_captures;
    Check(res.status.ok() && drops == 0 && captures == 0,
          absl::StrCat("after the warm-up (", rep.ToString(), ") a ", prompt, "-token request at k = 3 drops ", drops,
                       " graph sets and captures ", captures, " target graphs (", res.stats.steps, " steps)"));
  }
}

// The speculative step's device checks (the full run and --spec / --spec-host).
void CheckSpeculativeOps() {
  CheckDeviceSampler();
  CheckDeviceAccept();
  CheckDeviceSpeculation();
  CheckWarmupKeepsGraphs();
}

int RunSpecChecks(bool kernels) {
  g_device_sampling = kernels;
  std::printf("speculative ops: %s\n", SamplingMode());
  CheckSpeculativeOps();
  std::printf("SUMMARY: %d checks, %d failed\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

int RunAttnChecks() {
  CheckAttentionOps(false);
  std::printf("SUMMARY: %d checks, %d failed\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

// ------------------------------------------------------------------ benchmarks

struct Timer {
  cudaEvent_t a, b;
  cudaStream_t s;
  explicit Timer(void* stream) : s(static_cast<cudaStream_t>(stream)) {
    CUDA_OK(cudaEventCreate(&a));
    CUDA_OK(cudaEventCreate(&b));
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  // Median of `reps` timings (ms) of fn, after `warm` warm-up runs.
  double Median(int warm, int reps, const std::function<void()>& fn) {
    for (int i = 0; i < warm; ++i) fn();
    std::vector<double> ts;
    for (int i = 0; i < reps; ++i) {
      CUDA_OK(cudaEventRecord(a, s));
      fn();
      CUDA_OK(cudaEventRecord(b, s));
      CUDA_OK(cudaEventSynchronize(b));
      float ms = 0;
      CUDA_OK(cudaEventElapsedTime(&ms, a, b));
      ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    return ts[ts.size() / 2];
  }
};

double BenchCopy() {
  const size_t bytes = size_t{2} << 30;
  void *a = nullptr, *b = nullptr;
  CUDA_OK(cudaMalloc(&a, bytes));
  CUDA_OK(cudaMalloc(&b, bytes));
  CUDA_OK(cudaMemset(a, 1, bytes));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreate(&s));
  Timer t(s);
  const double ms = t.Median(3, 20, [&] { CUDA_OK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s)); });
  cudaFree(a);
  cudaFree(b);
  cudaStreamDestroy(s);
  const double gbs = 2.0 * bytes / (ms * 1e-3) / 1e9;
  std::printf("BENCH copy: %.0f MiB device-to-device in %.3f ms = %.0f GB/s (read + write)\n", bytes / 1048576.0, ms,
              gbs);
  return gbs;
}

// Matvec timing of one matrix shape: three copies of the matrix with three
// activation buffers, rotated, so neither L2 reuse nor the q/k/v grouping
// flatters the numbers. Returns ms per matvec.
struct MatvecBench {
  OpEnv env;
  std::vector<Weight> ws;
  std::vector<float*> xs;
  float* y = nullptr;
  absl::Status Init(GgmlType type, int64_t rows, int64_t k) {
    SPECD_RETURN_IF_ERROR(env.Init());
    for (int i = 0; i < 3; ++i) {
      SPECD_ASSIGN_OR_RETURN(Weight w, env.gpu->LoadWeight({absl::StrCat("bench.", i), type, k, rows, nullptr, 0}));
      ws.push_back(w);
      SPECD_ASSIGN_OR_RETURN(float* x, env.gpu->AllocActivations(32 * k));
      std::vector<float> h(32 * k);
      Rng r(5 + i);
      for (auto& v : h) v = r.Gauss();
      if (cudaMemcpy(x, h.data(), h.size() * 4, cudaMemcpyHostToDevice) != cudaSuccess)
        return absl::InternalError("upload");
      xs.push_back(x);
    }
    SPECD_ASSIGN_OR_RETURN(y, env.gpu->AllocActivations(32 * rows));
    return absl::OkStatus();
  }
  double Ms(int n) {
    Timer timer(env.ctl->Stream());
    // 12 matvecs per timed run; the activation quantization happens once per
    // buffer (in the model it is fused into the producing kernel).
    return timer.Median(3, 15, [&] {
      for (int i = 0; i < 12; ++i) env.gpu->MatMul(ws[i % 3], nullptr, xs[i % 3], n, y);
      (void)env.ctl->Flush();
    }) / 12.0;
  }
};

void BenchMatvec(double copy_gbs, std::vector<GgmlType> types = {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,
                                                                  GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q2_K}) {
  std::printf("BENCH matvec: weight GB/s (%% of copy bandwidth) and us per type, matrix rows x K, columns n "
              "[warps per tile x groups per warp]\n");
  struct M {
    int64_t rows, k;
  };
  for (M m : {M{25600, 5120}, M{5120, 25600}, M{8192, 5120}, M{1024, 5120}}) {
    for (GgmlType type : types) {
      MatvecBench mb;
      CHECK_OK(mb.Init(type, m.rows, m.k));
      const mmv::Plan plan = cuda::MmvPlan(type, mmv::Tiles(m.rows), m.k);
      std::string line = absl::StrCat("  ", std::string(TypeName(type)), " ", m.rows, "x", m.k, " [",
                                      plan.tile_warps, " warps x ", plan.gpw, " groups per tile]:");
      for (int n : {1, 2, 4, 7, 8, 9, 16, 24, 30, 32}) {
        const double ms = mb.Ms(n);
        const double gbs = mb.ws[0].nbytes / (ms * 1e-3) / 1e9;
        absl::StrAppend(&line, absl::StrFormat("  n=%d %.0f (%.0f%%) %.1fus", n, gbs, 100.0 * gbs / copy_gbs, ms * 1e3));
      }
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
  }
}

int RunProfile() {
  MatvecBench mb;
  if (!mb.Init(GgmlType::Q4_K, 25600, 5120).ok()) return 1;
  mb.env.gpu->MatMul(mb.ws[0], nullptr, mb.xs[0], 1, mb.y);
  if (!mb.env.gpu->Synchronize().ok()) return 1;
  mb.env.gpu->MatMul(mb.ws[1], nullptr, mb.xs[1], 1, mb.y);
  if (!mb.env.gpu->Synchronize().ok()) return 1;
  mb.env.gpu->MatMul(mb.ws[2], nullptr, mb.xs[2], 7, mb.y);
  if (!mb.env.gpu->Synchronize().ok()) return 1;
  return 0;
}

// Attention of a 32B-class layer at context 4096 (KV F16, zeros), for ncu:
// kernel v1 then v2, each a warm-up, then 1 query and 7 queries (graphs off:
// one launch per kernel; v1: AttnSplitKernel, v2: AttnSplitV2Kernel, each
// followed by AttnMergeKernel).
int ProfileAttention() {
  const int H = 64, KVH = 8, HD = 128, ctx = 4096;
  BackendOptions o;
  o.name = "cuda";
  o.cuda_graphs = false;
  auto be = CreateCudaBackend(o);
  if (!be.ok()) return 1;
  KvLayout kv;
  kv.n_layers = 1;
  kv.n_kv_heads = KVH;
  kv.head_dim = HD;
  kv.block_size = 16;
  kv.n_blocks = ctx / 16;
  kv.type = GgmlType::F16;
  if (!(*be)->InitKv(kv).ok()) return 1;
  auto q = (*be)->AllocActivations(static_cast<size_t>(8) * H * HD);
  auto kk = (*be)->AllocActivations(static_cast<size_t>(8) * KVH * HD);
  auto vv = (*be)->AllocActivations(static_cast<size_t>(8) * KVH * HD);
  auto out = (*be)->AllocActivations(static_cast<size_t>(8) * H * HD);
  if (!q.ok() || !kk.ok() || !vv.ok() || !out.ok()) return 1;
  AttentionParams ap{0, H, KVH, HD, 1.0f / std::sqrt(128.0f)};
  for (int kernel : {1, 2})
  for (int n : {1, 1, 7}) {
    SetAttn(kernel);
    if (n == 1) std::printf("profile-attn: kernel v%d: KvWrite + split + combine for warm-up, 1 query, 7 queries\n", kernel);
    std::fflush(stdout);
    Batch b;
    BatchSeq sq;
    sq.slot = 0;
    sq.kv_len = ctx;
    for (int i = 0; i < ctx / 16; ++i) sq.blocks.push_back(i);
    b.seqs = {sq};
    for (int i = 0; i < n; ++i) {
      b.tokens.push_back(0);
      b.pos.push_back(ctx - n + i);
      b.seq_index.push_back(0);
    }
    if (!(*be)->SetBatch(b).ok()) return 1;
    (*be)->Attention(*q, *kk, *vv, ap, *out);
    if (!(*be)->Synchronize().ok()) return 1;
  }
  SetAttn(2);
  return 0;
}

void BenchAttention() {
  // 32B-class attention: 64 query heads, 8 KV heads, head_dim 128.
  const int H = 64, KVH = 8, HD = 128, ctx = 4096;
  int best_split = cuda::kAttnSplit;
  double best_t = 1e30;
  struct Cfg {
    GgmlType kvt;
    int split;
  };
  for (Cfg cfg : {Cfg{GgmlType::F16, 128}, Cfg{GgmlType::F16, 256}, Cfg{GgmlType::Q8_0, 0}}) {
    const GgmlType kvt = cfg.kvt;
    SetAttn(cuda::GetTuning().attn_kernel, cfg.split > 0 ? cfg.split : best_split);
    double sum_t = 0;
    BackendOptions o;
    o.name = "cuda";
    o.cuda_graphs = false;
    auto be = CreateCudaBackend(o);
    CHECK_OK(be.status());
    CudaBackendControl* ctl = AsCudaControl(be->get());
    KvLayout kv;
    kv.n_layers = 1;
    kv.n_kv_heads = KVH;
    kv.head_dim = HD;
    kv.block_size = 16;
    kv.n_blocks = ctx / 16;
    kv.type = kvt;
    CHECK_OK((*be)->InitKv(kv));
    auto q = (*be)->AllocActivations(static_cast<size_t>(ctx) * H * HD);
    auto kk = (*be)->AllocActivations(static_cast<size_t>(ctx) * KVH * HD);
    auto vv = (*be)->AllocActivations(static_cast<size_t>(ctx) * KVH * HD);
    auto out = (*be)->AllocActivations(static_cast<size_t>(ctx) * H * HD);
    CHECK_OK(out.status());
    {
      std::vector<float> h(static_cast<size_t>(ctx) * H * HD);
      Rng r(3);
      for (auto& v : h) v = r.Gauss();
      CUDA_OK(cudaMemcpy(*q, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemcpy(*kk, h.data(), static_cast<size_t>(ctx) * KVH * HD * 4, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemcpy(*vv, h.data() + 7, static_cast<size_t>(ctx) * KVH * HD * 4, cudaMemcpyHostToDevice));
    }
    auto batch = [&](int n) {
      Batch b;
      BatchSeq s;
      s.slot = 0;
      s.kv_len = ctx;
      for (int i = 0; i < ctx / 16; ++i) s.blocks.push_back(i);
      b.seqs = {s};
      for (int i = 0; i < n; ++i) {
        b.tokens.push_back(0);
        b.pos.push_back(ctx - n + i);
        b.seq_index.push_back(0);
      }
      return b;
    };
    AttentionParams ap{0, H, KVH, HD, 1.0f / std::sqrt(128.0f)};
    Timer timer(ctl->Stream());
    for (int kernel : {1, 2}) {
    SetAttn(kernel);
    // Fill the whole KV with a 4096-token prefill (timed once).
    Batch pre = batch(ctx);
    CHECK_OK((*be)->SetBatch(pre));
    const double pre_ms = timer.Median(0, 1, [&] {
      (*be)->Attention(*q, *kk, *vv, ap, *out);
      (void)ctl->Flush();
    });
    std::string line = absl::StrFormat(
        "BENCH attention v%d kv=%s split=%d ctx=%d (64/8 heads x 128): prefill-4096 %.2f ms", kernel,
        std::string(TypeName(kvt)), cuda::GetTuning().attn_split, ctx, pre_ms);
    for (int n : {1, 7}) {
      Batch b = batch(n);
      CHECK_OK((*be)->SetBatch(b));
      const double ms = timer.Median(5, 50, [&] {
        (*be)->Attention(*q, *kk, *vv, ap, *out);
        (void)ctl->Flush();
      });
      const double kv_bytes = 2.0 * ctx * KVH * RowBytes(kvt, HD);
      absl::StrAppend(&line, absl::StrFormat("  %d query: %.1f us (%.0f GB/s of KV)", n, ms * 1e3,
                                             kv_bytes / (ms * 1e-3) / 1e9));
      if (kernel == 2) sum_t += ms;  // the split is chosen for the default kernel
    }
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    CHECK_OK((*be)->Synchronize());
    }
    SetAttn(2);
    if (cfg.split > 0 && sum_t < best_t) {
      best_t = sum_t;
      best_split = cfg.split;
    }
  }
  SetAttn(cuda::GetTuning().attn_kernel, best_split);
  std::printf("  -> attention split %d positions\n", best_split);
}

// A GGUF whose tensor data is never touched: header written into an
// anonymous mapping as large as the file would be; with a backend that
// ignores host data (CUDA LoadWeight with host_data == nullptr) the weights
// are generated on the device.
class DeviceWeights final : public Backend {
 public:
  explicit DeviceWeights(Backend* b) : b_(b) {}
  std::string Name() const override { return b_->Name(); }
  size_t AvailableMemory() const override { return b_->AvailableMemory(); }
  absl::StatusOr<Weight> LoadWeight(const WeightSource& src) override {
    WeightSource s = src;
    s.host_data = nullptr;
    return b_->LoadWeight(s);
  }
  absl::Status InitKv(const KvLayout& l) override { return b_->InitKv(l); }
  absl::StatusOr<float*> AllocActivations(size_t n) override { return b_->AllocActivations(n); }
  BackendMemory Memory() const override { return b_->Memory(); }
  absl::Status SetBatch(const Batch& b) override { return b_->SetBatch(b); }
  void Embed(const Weight& e, float* o) override { b_->Embed(e, o); }
  void RmsNorm(const float* x, const Weight& w, float eps, int rows, float* o) override { b_->RmsNorm(x, w, eps, rows, o); }
  void AddRmsNorm(float* x, const float* r, const Weight& w, float eps, int rows, float* o) override {
    b_->AddRmsNorm(x, r, w, eps, rows, o);
  }
  void MatMul(const Weight& w, const Weight* bias, const float* x, int n, float* y) override { b_->MatMul(w, bias, x, n, y); }
  void Rope(float* x, int nh, int hd, const RopeParams& p) override { b_->Rope(x, nh, hd, p); }
  void Attention(const float* q, const float* k, const float* v, const AttentionParams& p, float* o) override {
    b_->Attention(q, k, v, p, o);
  }
  void SwiGLU(const float* g, const float* u, int n, int dim, float* o) override { b_->SwiGLU(g, u, n, dim, o); }
  void Add(float* x, const float* y, int64_t n) override { b_->Add(x, y, n); }
  void GatherOutRows(const float* x, int dim, float* o) override { b_->GatherOutRows(x, dim, o); }
  absl::Status ReadToHost(const float* s, float* h, size_t n) override { return b_->ReadToHost(s, h, n); }
  absl::Status Synchronize() override { return b_->Synchronize(); }
  void Sample(const float* l, int v, const std::vector<SampleRow>& r) override { b_->Sample(l, v, r); }
  void Accept(const float* l, int v, const std::vector<AcceptRows>& a) override { b_->Accept(l, v, a); }
  absl::StatusOr<void*> AllocBuffer(size_t n) override { return b_->AllocBuffer(n); }
  absl::Status WriteBytes(const void* h, void* d, size_t n) override { return b_->WriteBytes(h, d, n); }
  bool HostMemory() const override { return b_->HostMemory(); }
  int Mark() override { return b_->Mark(); }
  double Seconds(int a, int b) override { return b_->Seconds(a, b); }
  void ClearMarks() override { b_->ClearMarks(); }
  absl::Status ReadBytes(const void* s, void* h, size_t n) override { return b_->ReadBytes(s, h, n); }

 private:
  Backend* b_;
};

struct HeaderWriter {
  std::vector<uint8_t> buf;
  template <class T>
  void Put(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    buf.insert(buf.end(), p, p + sizeof(T));
  }
  void Str(const std::string& s) {
    Put<uint64_t>(s.size());
    buf.insert(buf.end(), s.begin(), s.end());
  }
  void KvStr(const std::string& k, const std::string& v) {
    Str(k);
    Put<uint32_t>(8);
    Str(v);
  }
  void KvU32(const std::string& k, uint32_t v) {
    Str(k);
    Put<uint32_t>(4);
    Put<uint32_t>(v);
  }
  void KvF32(const std::string& k, float v) {
    Str(k);
    Put<uint32_t>(6);
    Put<float>(v);
  }
};

struct BigModel {
  void* map = nullptr;
  size_t size = 0;
  std::unique_ptr<GgufFile> file;
  size_t weight_bytes = 0;
  ~BigModel() {
    file.reset();
    if (map) munmap(map, size);
  }
};

absl::Status MakeBigModel(const Shape& s, const std::string& mix, BigModel* out) {
  struct T {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    uint64_t bytes;
  };
  std::vector<T> ts;
  const int64_t d = s.d, q = int64_t{s.heads} * s.head_dim, kv = int64_t{s.kv_heads} * s.head_dim, ff = s.ffn;
  auto mat = [&](const std::string& n, int64_t ne0, int64_t ne1, int layer) {
    const GgmlType t = TypeFor(mix, n, layer, s.layers);
    ts.push_back({n, t, {ne0, ne1}, RowBytes(t, ne0) * static_cast<uint64_t>(ne1)});
  };
  auto vec = [&](const std::string& n, int64_t ne0) { ts.push_back({n, GgmlType::F32, {ne0}, uint64_t(ne0) * 4}); };
  mat("token_embd.weight", d, s.vocab, -1);
  for (int l = 0; l < s.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    vec(b + "attn_norm.weight", d);
    mat(b + "attn_q.weight", d, q, l);
    mat(b + "attn_k.weight", d, kv, l);
    mat(b + "attn_v.weight", d, kv, l);
    mat(b + "attn_output.weight", q, d, l);
    if (std::string(s.arch) == "qwen2") {
      vec(b + "attn_q.bias", q);
      vec(b + "attn_k.bias", kv);
      vec(b + "attn_v.bias", kv);
    }
    if (std::string(s.arch) == "qwen3") {
      vec(b + "attn_q_norm.weight", s.head_dim);
      vec(b + "attn_k_norm.weight", s.head_dim);
    }
    vec(b + "ffn_norm.weight", d);
    mat(b + "ffn_gate.weight", d, ff, l);
    mat(b + "ffn_up.weight", d, ff, l);
    mat(b + "ffn_down.weight", ff, d, l);
  }
  vec("output_norm.weight", d);
  if (!s.tied) mat("output.weight", d, s.vocab, -1);
  HeaderWriter h;
  h.Put<uint32_t>(kGgufMagic);
  h.Put<uint32_t>(3);
  h.Put<uint64_t>(ts.size());
  h.Put<uint64_t>(11);
  const std::string a = std::string(s.arch) + ".";
  h.KvStr("general.architecture", s.arch);
  h.KvU32(a + "block_count", s.layers);
  h.KvU32(a + "context_length", 40960);
  h.KvU32(a + "embedding_length", s.d);
  h.KvU32(a + "feed_forward_length", s.ffn);
  h.KvU32(a + "attention.head_count", s.heads);
  h.KvU32(a + "attention.head_count_kv", s.kv_heads);
  h.KvU32(a + "attention.key_length", s.head_dim);
  h.KvU32(a + "attention.value_length", s.head_dim);
  h.KvF32(a + "attention.layer_norm_rms_epsilon", 1e-6f);
  h.KvF32(a + "rope.freq_base", s.rope_base);
  uint64_t off = 0;
  for (const T& t : ts) {
    h.Str(t.name);
    h.Put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t v : t.ne) h.Put<uint64_t>(static_cast<uint64_t>(v));
    h.Put<uint32_t>(static_cast<uint32_t>(t.type));
    h.Put<uint64_t>(off);
    off = (off + t.bytes + 31) / 32 * 32;
    out->weight_bytes += t.bytes;
  }
  while (h.buf.size() % 32) h.buf.push_back(0);
  out->size = h.buf.size() + off;
  out->map = mmap(nullptr, out->size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (out->map == MAP_FAILED) {
    out->map = nullptr;
    return absl::ResourceExhaustedError("mmap failed");
  }
  std::memcpy(out->map, h.buf.data(), h.buf.size());
  SPECD_ASSIGN_OR_RETURN(out->file, GgufFile::FromBuffer(static_cast<const uint8_t*>(out->map), out->size, mix));
  return absl::OkStatus();
}

// prefill == false: the KV cache keeps the zeros InitKv wrote (the attention
// costs the same; the logits are not meaningful) and the load is faster.
void BenchModel(const char* label, const Shape& s, const std::string& mix, GgmlType kvt, double copy_gbs,
                bool prefill = true, std::vector<int> ks = {1, 2, 4, 6, 8}, bool pdl = true) {
  BigModel bm;
  CHECK_OK(MakeBigModel(s, mix, &bm));
  BackendOptions o;
  o.name = "cuda";
  o.cuda_pdl = pdl;
  auto bcfg = ModelConfig::FromGguf(*bm.file);
  CHECK_OK(bcfg.status());
  auto cuda = CreateCudaBackend(Engine::BackendFor(*bcfg, o));  // as the engine sizes it
  CHECK_OK(cuda.status());
  CudaBackendControl* ctl = AsCudaControl(cuda->get());
  DeviceWeights be(cuda->get());
  const int ctx = 4096, max_batch = 256;
  const auto t0 = std::chrono::steady_clock::now();
  auto model = Model::Load(*bm.file, &be, max_batch, 16);
  CHECK_OK(model.status());
  const ModelConfig& c = (*model)->config();
  const KvLayout kv = KvOf(c, 16, ctx / 16 + 8, kvt);
  CHECK_OK(be.InitKv(kv));
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const BackendMemory mem = be.Memory();
  std::vector<int32_t> blocks;
  for (int i = 0; i < kv.n_blocks; ++i) blocks.push_back(i);
  auto batch = [&](int pos0, int n, int n_out) {
    Batch b;
    BatchSeq sq{0, pos0 + n, {}};
    sq.blocks.assign(blocks.begin(), blocks.begin() + (pos0 + n + 15) / 16);
    b.seqs = {sq};
    for (int i = 0; i < n; ++i) {
      b.tokens.push_back((pos0 + i) * 7919 % c.vocab_size);
      b.pos.push_back(pos0 + i);
      b.seq_index.push_back(0);
    }
    for (int i = n - n_out; i < n; ++i) b.out_rows.push_back(i);
    return b;
  };
  std::vector<float> logits(static_cast<size_t>(16) * c.vocab_size);
  // Prefill to ctx - 16 in chunks of 256 (cuBLAS), timed as a whole.
  const auto p0 = std::chrono::steady_clock::now();
  int pos = 0;
  while (prefill && pos < ctx - 16) {
    const int n = std::min(max_batch, ctx - 16 - pos);
    Batch b = batch(pos, n, 1);
    auto out = (*model)->Forward(b);
    CHECK_OK(out.status());
    CHECK_OK(be.ReadToHost(*out, logits.data(), c.vocab_size));
    pos += n;
  }
  const double pre_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - p0).count();
  bool finite = true;
  for (int i = 0; i < c.vocab_size; ++i) finite = finite && std::isfinite(logits[i]);
  Timer timer(ctl->Stream());
  auto step = [&](int n, int pos0 = -1) {
    return timer.Median(3, 20, [&] {
      Batch b = batch(pos0 < 0 ? ctx - 16 : pos0, n, n);
      auto out = (*model)->Forward(b);
      if (!out.ok() || !be.ReadToHost(*out, logits.data(), static_cast<size_t>(n) * c.vocab_size).ok()) std::exit(3);
    });
  };
  const double dec = step(1);
  const double roof_ms = bm.weight_bytes / (copy_gbs * 1e9) * 1e3;
  std::string line = absl::StrFormat(
      "BENCH model %s (%s, %s, kv %s; pdl %s, attention split %d): weights %.2f GB, load %.1f s, "
      "prefill %d tok %.2f s (%.0f tok/s), finite=%d\n"
      "  ledger: weights %.2f GB kv %.2f GB act %.2f GB other %.3f GB\n"
      "  decode ctx %d: %.2f ms/token (%.1f tok/s); roofline %.2f ms -> %.0f%% of copy bandwidth\n  verify:",
      label, s.arch, mix, std::string(TypeName(kvt)), pdl ? "on" : "off", cuda::GetTuning().attn_split,
      bm.weight_bytes / 1e9, load_s, pos, pre_s, pos > 0 ? pos / pre_s : 0.0, finite,
      mem.weights / 1e9, mem.kv_pool / 1e9, mem.activations / 1e9, mem.other / 1e9, ctx - 15, dec, 1e3 / dec, roof_ms,
      100.0 * roof_ms / dec);
  for (int k : ks) {
    const double v = step(k + 1);
    absl::StrAppend(&line, absl::StrFormat(" k=%d %.2f ms (%.2fx)", k, v, v / dec));
  }
  // The same steps at context 32: the difference is (mostly) attention over 4096 positions.
  const double dec32 = step(1, 16);
  absl::StrAppend(&line, absl::StrFormat("\n  at context 32: decode %.2f ms (%.0f%% of roofline)", dec32,
                                         100.0 * roof_ms / dec32));
  if (std::find(ks.begin(), ks.end(), 6) != ks.end())
    absl::StrAppend(&line, absl::StrFormat(", verify k=6 %.2f ms", step(7, 16)));
  const auto st = ctl->GetStats();
  absl::StrAppend(&line, absl::StrFormat("\n  graphs: %lld captures, %lld launches", static_cast<long long>(st.graph_captures),
                                         static_cast<long long>(st.graph_launches)));
  ctl->SetGraphs(false);
  const double dec_nog = step(1);
  absl::StrAppend(&line, absl::StrFormat("; decode without graphs %.2f ms", dec_nog));
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// One forward of a 27B-class Q4_K_S model (synthetic weights, zero KV,
// graphs off so that every kernel is its own launch) between
// cudaProfilerStart/Stop, for `ncu --profile-from-start off`: `seqs`
// sequences of `tokens` tokens each (all of them outputs, as in a verify),
// ending at context `ctx`. Default: one decode step at 4081.
void ProfileStep(int seqs, int tokens, int ctx, GgmlType kv_type) {
  const Shape q27 = {"qwen3", 54, 5120, 64, 8, 128, 25600, 151936, false, 1e6f};
  BigModel bm;
  CHECK_OK(MakeBigModel(q27, "Q4_K_S", &bm));
  BackendOptions o;
  o.name = "cuda";
  o.cuda_graphs = false;
  auto pcfg = ModelConfig::FromGguf(*bm.file);
  CHECK_OK(pcfg.status());
  auto cuda = CreateCudaBackend(Engine::BackendFor(*pcfg, o));  // as the engine sizes it
  CHECK_OK(cuda.status());
  DeviceWeights be(cuda->get());
  auto model = Model::Load(*bm.file, &be, 64, 64);
  CHECK_OK(model.status());
  const ModelConfig& c = (*model)->config();
  const int nb = (ctx + 15) / 16;
  CHECK_OK(be.InitKv(KvOf(c, 16, seqs * nb + 8, kv_type)));
  Batch b;
  for (int s = 0; s < seqs; ++s) {
    BatchSeq sq{s, ctx, {}};
    for (int i = 0; i < nb; ++i) sq.blocks.push_back(s * nb + i);
    b.seqs.push_back(sq);
    for (int j = 0; j < tokens; ++j) {
      b.out_rows.push_back(static_cast<int32_t>(b.tokens.size()));
      b.tokens.push_back(1234 + j);
      b.pos.push_back(ctx - tokens + j);
      b.seq_index.push_back(s);
    }
  }
  std::vector<float> logits(static_cast<size_t>(c.vocab_size) * b.tokens.size());
  for (int i = 0; i < 3; ++i) {
    if (i == 2) CUDA_OK(cudaProfilerStart());
    auto out = (*model)->Forward(b);
    CHECK_OK(out.status());
    CHECK_OK(be.ReadToHost(*out, logits.data(), logits.size()));
    if (i == 2) CUDA_OK(cudaProfilerStop());
  }
}
int RunProfileStep(int seqs, int tokens, int ctx, const char* kv = "q8_0") {
  const auto t = ParseKvType(kv);
  if (!t.ok()) {
    std::fprintf(stderr, "--profile-step: %s\n", std::string(t.status().message()).c_str());
    return 2;
  }
  ProfileStep(seqs, tokens, ctx, *t);
  return g_failures == 0 ? 0 : 1;
}

int RunChecks(const char* self, bool quick, bool matmul, bool only_matmul) {
  if (matmul) {
    OpEnv env;
    const absl::Status st = env.Init();
    Check(st.ok(), "create the CUDA backend: " + st.ToString());
    if (!st.ok()) return 1;
    cudaDeviceProp p{};
    cudaGetDeviceProperties(&p, 0);
    std::printf("device: %s, sm_%d%d, %d SMs, %.1f GiB\n", p.name, p.major, p.minor, p.multiProcessorCount,
                p.totalGlobalMem / 1073741824.0);
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1,
                       GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::F16, GgmlType::BF16,
                       GgmlType::F32}) {
      CheckMatMul(env, t, 200, 2048);
      if (TypeTraits(t).block_size == 32) CheckMatMul(env, t, 70, 1056);  // partial last stage
    }
    CheckMatMul(env, GgmlType::Q4_K, 1000, 256);
    CheckMatMul(env, GgmlType::Q6_K, 40, 5120);
    // Rows not a multiple of the 16-row tile, an odd number of groups, long K
    // (several warps per tile), and the 27B/32B shapes.
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0}) {
      CheckMatMul(env, t, 130, 768);
      CheckMatMul(env, t, 130, 25600);
      if (!quick) CheckMatMul(env, t, 1030, 5120);
    }
    CheckMatMul(env, GgmlType::Q4_K, 25600, 5120);  // one warp per tile, several waves
    for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q4_1}) CheckGroupedMatMul(env, t, 2048);
  }
  if (only_matmul) {
    std::printf("SUMMARY: %d checks, %d failed\n", g_checks, g_failures);
    return g_failures == 0 ? 0 : 1;
  }
  CheckFusedQuant();
  CheckAttentionOps(quick);
  CheckIpc(self);
  CheckWeightSharing(self);
  CheckAcceptance();
  CheckSpeculativeOps();
  const std::vector<std::string> types = {"Q4_K", "Q5_K", "Q6_K", "Q8_0", "Q4_0", "Q4_1", "Q5_0",
                                          "Q5_1", "Q2_K", "Q3_K", "F16",  "BF16", "F32",  "Q4_K_M"};
  for (const Shape* s : {&kLlama, &kQwen2, &kQwen3}) {
    for (const std::string& t : types) {
      if (quick && t != "Q4_K" && t != "F16") continue;
      CheckModel(*s, t, GgmlType::F16, t == "Q4_K" || t == "Q6_K" || t == "F32" || t == "Q4_K_M");
    }
    CheckModel(*s, "Q4_K", GgmlType::Q8_0, true);
    CheckModel(*s, "Q8_0", GgmlType::F32, true);
    CheckSpeculative(*s, "Q4_K_M", "Q4_0");
    if (quick) break;
  }
  std::printf("SUMMARY: %d checks, %d failed\n", g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

// A short benchmark for a tight device budget: copy bandwidth, the Q4_K/Q6_K
// matvec, attention, the 32B-class decode and k=6 verify (with and without
// programmatic dependent launch).
int RunBenchMin() {
  const double copy = BenchCopy();
  BenchMatvec(copy, {GgmlType::Q4_K, GgmlType::Q6_K});
  BenchAttention();
  const Shape q32 = {"qwen3", 64, 5120, 64, 8, 128, 25600, 151936, false, 1e6f};
  const Shape q27 = {"qwen3", 54, 5120, 64, 8, 128, 25600, 151936, false, 1e6f};
  BenchModel("27B-class target", q27, "Q4_K_S", GgmlType::Q8_0, copy, false, {6, 8});
  BenchModel("32B-class target", q32, "Q4_K_M", GgmlType::F16, copy, false, {1, 6});
  std::printf("SUMMARY: bench done, %d failed checks\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}

int RunBench() {
  const double copy = BenchCopy();
  BenchMatvec(copy);
  BenchAttention();
  const Shape q32 = {"qwen3", 64, 5120, 64, 8, 128, 25600, 151936, false, 1e6f};
  const Shape q3b = {"qwen2", 36, 2048, 16, 2, 128, 11008, 151936, true, 1e6f};
  BenchModel("32B-class target", q32, "Q4_K_M", GgmlType::F16, copy, false);
  BenchModel("3B-class draft", q3b, "Q4_K_M", GgmlType::Q8_0, copy, false);
  BenchModel("32B-class target", q32, "Q4_K_M", GgmlType::F16, copy, false, {6}, false);
  {  // the FP32 attention (v1) for comparison
    SetAttn(1);
    BenchModel("32B-class target (attention v1)", q32, "Q4_K_M", GgmlType::F16, copy, false, {6});
    SetAttn(2);
  }
  std::printf("SUMMARY: bench done, %d failed checks\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace specd

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "--ipc-child") == 0) return specd::IpcChild(argv[2]);
  if (argc >= 5 && std::strcmp(argv[1], "--share-child") == 0) return specd::ShareChild(argv[2], argv[3], argv[4]);
  if (argc >= 2 && std::strcmp(argv[1], "--probe") == 0) return 0;  // the binary loads: its libraries are there
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("SKIP: no CUDA device (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 0;
  }
  bool bench = false, quick = false, matmul = true, only_matmul = false;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--wgmma-cols") == 0) {  // the wgmma matvec's column range (--cuda-wgmma-cols)
      const auto cols = specd::ParseWgmmaCols(argv[i + 1]);
      if (!cols.ok()) {
        std::printf("%s\n", std::string(cols.status().message()).c_str());
        return 2;
      }
      specd::cuda::Tuning t = specd::cuda::GetTuning();
      t.wgmma_min_cols = cols->first;
      t.wgmma_max_cols = cols->second;
      specd::cuda::SetTuning(t);
      std::printf("wgmma matvec columns %s\n", argv[i + 1]);
    }
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--bench-min") == 0) return specd::RunBenchMin();
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--bench-matvec") == 0) {
      specd::BenchMatvec(specd::BenchCopy(), {specd::GgmlType::Q4_K, specd::GgmlType::Q5_K, specd::GgmlType::Q6_K,
                                              specd::GgmlType::Q8_0});
      return 0;
    }
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--wgmma-cols") == 0 && i + 1 < argc) {  // (above)
      ++i;
      continue;
    }
    if (std::strcmp(argv[i], "--attn-split") == 0 && i + 1 < argc) {  // the checks at another split length
      const int split = std::atoi(argv[++i]);
      if (split < 32 || split > 256 || split % 32 != 0) {
        std::fprintf(stderr, "--attn-split takes a multiple of 32 up to 256, not %s\n", argv[i]);
        return 2;
      }
      specd::SetAttn(2, split);
      std::printf("attention split %d positions\n", split);
      continue;
    }
    if (std::strcmp(argv[i], "--types") == 0 && i + 1 < argc) {
      const std::vector<std::string> names = absl::StrSplit(argv[++i], ',');
      for (const std::string& name : names) {
        const auto t = specd::TypeFromName(name);
        if (!t) {
          std::fprintf(stderr, "--types: unknown weight type %s\n", name.c_str());
          return 2;
        }
        specd::g_types.push_back(*t);
      }
      continue;
    }
    if (std::strcmp(argv[i], "--bench") == 0) bench = true;
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    if (std::strcmp(argv[i], "--no-matmul") == 0) matmul = false;
    if (std::strcmp(argv[i], "--matmul-only") == 0) only_matmul = true;
    if (std::strcmp(argv[i], "--profile") == 0) return specd::RunProfile();
    if (std::strcmp(argv[i], "--profile-attn") == 0) return specd::ProfileAttention();
    if (std::strcmp(argv[i], "--profile-step") == 0)
      return i + 4 < argc ? specd::RunProfileStep(std::atoi(argv[i + 1]), std::atoi(argv[i + 2]),
                                                  std::atoi(argv[i + 3]), argv[i + 4])
             : i + 3 < argc ? specd::RunProfileStep(std::atoi(argv[i + 1]), std::atoi(argv[i + 2]),
                                                    std::atoi(argv[i + 3]))
                            : specd::RunProfileStep(1, 1, 4081);
    if (std::strcmp(argv[i], "--spec") == 0) return specd::RunSpecChecks(true);
    if (std::strcmp(argv[i], "--attn-only") == 0) return specd::RunAttnChecks();
    if (std::strcmp(argv[i], "--spec-host") == 0) return specd::RunSpecChecks(false);
  }
  return bench ? specd::RunBench() : specd::RunChecks(argv[0], quick, matmul, only_matmul);
}
