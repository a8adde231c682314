#if defined(__GNUC__) && !defined(__clang__)
// No FMA contraction anywhere (GCC contracts in C++ even in ISO mode when the
// target has FMA, as the AVX2/AVX-512 clones below do): results must not
// depend on the CPU.
#pragma GCC optimize("fp-contract=off")
#endif
#include "common/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <string>

#include "common/quant/block_random.h"
#include "common/quant/quant.h"
#include "common/util/fp16.h"

namespace specd {
namespace {

// Row blocking for MatMul: a block of weight rows is applied to a tile of
// tokens so that both stay in cache during a prefill.
constexpr int64_t kRowBlock = 16;
constexpr int64_t kTokenTile = 32;

inline float RowRms(const float* x, int dim, float eps) {
  double ss = 0;
  for (int i = 0; i < dim; ++i) ss += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(1.0 / std::sqrt(ss / dim + static_cast<double>(eps)));
}

// A KV row as floats: F32 rows are used in place, F16 and Q8_0 rows decoded
// into `buf`.
inline const float* KvRowFloats(GgmlType type, const uint8_t* src, float* buf, int n) {
  if (type == GgmlType::F32) return reinterpret_cast<const float*>(src);
  if (type == GgmlType::F16) {
    HalfToFloatRow(reinterpret_cast<const uint16_t*>(src), buf, n);
    return buf;
  }
  DequantizeRow(type, src, buf, n);
  return buf;
}

// Dot product with 16 fixed partial sums combined pairwise: the compiler
// vectorizes it, and the order (hence the result) is the same on any ISA
// (no FMA contraction in ISO C++ mode).
inline float DotF32(const float* a, const float* b, int n) {
  float acc[16] = {};
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) acc[j] += a[i + j] * b[i + j];
  }
  for (; i < n; ++i) acc[i & 15] += a[i] * b[i];
  for (int w = 8; w > 0; w >>= 1) {
    for (int j = 0; j < w; ++j) acc[j] += acc[j + w];
  }
  return acc[0];
}

}  // namespace

// Attention's inner loops, built for AVX-512, AVX2 and the baseline (picked at
// load time). Plain multiplies and adds in a fixed order (contraction is off in
// ISO C++ mode), so every clone gives the same bits.
#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
#define SPECD_ATTN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SPECD_ATTN_CLONES
#endif
namespace cpu_detail {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#pragma GCC diagnostic push
// GCC 12's AVX-512 intrinsics self-initialize their "undefined" operands and
// trip -W(maybe-)uninitialized when inlined (GCC PR 105593, fixed in 12.3).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// DotF32 for n % 16 == 0 with AVX-512: lane l accumulates elements l, l+16,
// ... in order, then the same halving tree (8, 4, 2, 1) as DotF32's loop.
__attribute__((target("avx512f"))) inline float DotF32x16(const float* a, const float* b, int n) {
  __m512 acc = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16) acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(acc),
                                  _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}
__attribute__((target("avx512f"))) void ScoreRowsAvx512(const float* q, const float* const* rows, int nrows, int hd,
                                                        float scale, float* sc) {
  for (int j = 0; j < nrows; ++j) sc[j] = DotF32x16(q, rows[j], hd) * scale;
}
bool HasAvx512F() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}
#pragma GCC diagnostic pop
#endif
// sc[j] = dot(q, rows[j]) * scale for j < nrows.
SPECD_ATTN_CLONES void ScoreRowsGeneric(const float* q, const float* const* rows, int nrows, int hd, float scale,
                                        float* sc) {
  for (int j = 0; j < nrows; ++j) sc[j] = DotF32(q, rows[j], hd) * scale;
}
void ScoreRows(const float* q, const float* const* rows, int nrows, int hd, float scale, float* sc) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  if (hd % 16 == 0 && HasAvx512F()) return ScoreRowsAvx512(q, rows, nrows, hd, scale, sc);
#endif
  ScoreRowsGeneric(q, rows, nrows, hd, scale, sc);
}
// acc += w[j] * rows[j] for j < nrows, in order of j for every element; 16
// elements at a time so the partial sums stay in registers.
SPECD_ATTN_CLONES void AccumRows(const float* w, const float* const* rows, int nrows, int hd, float* acc) {
  int d0 = 0;
  for (; d0 + 16 <= hd; d0 += 16) {
    float a[16];
    for (int l = 0; l < 16; ++l) a[l] = acc[d0 + l];
    for (int j = 0; j < nrows; ++j) {
      const float wj = w[j];
      const float* vr = rows[j] + d0;
      for (int l = 0; l < 16; ++l) a[l] += wj * vr[l];
    }
    for (int l = 0; l < 16; ++l) acc[d0 + l] = a[l];
  }
  for (int j = 0; j < nrows; ++j) {
    const float wj = w[j];
    for (int d = d0; d < hd; ++d) acc[d] += wj * rows[j][d];
  }
}
}  // namespace cpu_detail

CpuBackend::CpuBackend(int threads, int64_t spin_us) : pool_(threads, spin_us) {}
CpuBackend::~CpuBackend() = default;

size_t CpuBackend::AvailableMemory() const {
  std::ifstream in("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

absl::StatusOr<Weight> CpuBackend::LoadWeight(const WeightSource& src) {
  if (src.host_data == nullptr && src.resident == nullptr) {
    // Synthesize random valid blocks, as the CUDA backend does (block_random.h).
    std::unique_ptr<uint8_t[]> buf(new (std::nothrow) uint8_t[src.nbytes]);
    if (!buf) return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", src.nbytes, " bytes for ", src.name));
    const SyntheticWeight sw = SyntheticWeightFor(src.name, src.ne0, src.ne1);
    const auto& tr = TypeTraits(src.type);
    std::atomic<bool> failed{false};
    pool_.ParallelFor(
        src.ne0 / tr.block_size * src.ne1,
        [&](int64_t b0, int64_t b1) {
          if (!RandomBlocks(src.type, buf.get() + b0 * tr.type_size, b0, b1 - b0, sw.seed, sw.sigma).ok()) failed = true;
        },
        /*grain=*/256);
    if (failed) return absl::InvalidArgumentError(absl::StrCat(src.name, ": cannot synthesize ", tr.name, " weights"));
    if (sw.mean != 0.0f && src.type == GgmlType::F32) {
      auto* f = reinterpret_cast<float*>(buf.get());
      for (int64_t i = 0; i < src.ne0 * src.ne1; ++i) f[i] += sw.mean;
    }
    WeightSource s2 = src;
    s2.host_data = buf.get();
    synthetic_.push_back(std::move(buf));
    return LoadWeight(s2);
  }
  Weight w;
  w.name = src.name;
  w.type = src.type;
  w.ne0 = src.ne0;
  w.ne1 = src.ne1;
  w.data = src.resident ? src.resident : src.host_data;
  w.nbytes = src.nbytes;
  // A resident weight is another engine's copy of the same bytes (backend.h): not this backend's.
  if (!src.resident) mem_.weights += src.nbytes;
  return w;
}

absl::Status CpuBackend::InitKv(const KvLayout& layout) {
  if (layout.type != GgmlType::F32 && layout.type != GgmlType::F16 && layout.type != GgmlType::Q8_0)
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache type ", TypeTraits(layout.type).name, " is not supported (f32, f16, q8_0)"));
  if (layout.head_dim % TypeTraits(layout.type).block_size != 0)
    return absl::InvalidArgumentError(absl::StrCat("head dimension ", layout.head_dim, " is not a multiple of ",
                                                   TypeTraits(layout.type).name, "'s block size"));
  kv_ = layout;
  kv_row_bytes_ = RowBytes(layout.type, layout.head_dim);
  const size_t bytes = layout.BlockBytes() * layout.n_blocks;
  k_pool_.clear();
  v_pool_.clear();
  for (int l = 0; l < layout.n_layers; ++l) {
    k_pool_.emplace_back(new (std::nothrow) uint8_t[bytes]());
    v_pool_.emplace_back(new (std::nothrow) uint8_t[bytes]());
    if (!k_pool_.back() || !v_pool_.back())
      return absl::ResourceExhaustedError(absl::StrCat("cannot allocate the KV pool (", bytes * 2 * layout.n_layers,
                                                       " bytes)"));
  }
  mem_.kv_pool = layout.TotalBytes();
  return absl::OkStatus();
}

absl::StatusOr<float*> CpuBackend::AllocActivations(size_t n_floats) {
  std::unique_ptr<float[]> buf(new (std::nothrow) float[n_floats]());
  if (!buf) return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", n_floats * 4, " bytes of activations"));
  float* p = buf.get();
  activations_.push_back(std::move(buf));
  mem_.activations += n_floats * sizeof(float);
  return p;
}

absl::Status CpuBackend::SetBatch(const Batch& batch) {
  Flush();
  const int bs = kv_.block_size;
  for (int t = 0; t < batch.n_tokens(); ++t) {
    const int si = batch.seq_index[t];
    if (si < 0 || si >= static_cast<int>(batch.seqs.size()))
      return absl::InvalidArgumentError("batch token refers to a missing sequence");
    const BatchSeq& s = batch.seqs[si];
    const int pos = batch.pos[t];
    if (pos < 0 || pos >= s.kv_len || pos / bs >= static_cast<int>(s.blocks.size()))
      return absl::InvalidArgumentError(absl::StrCat("position ", pos, " outside the blocks of sequence ", s.slot));
  }
  for (const auto& s : batch.seqs) {
    for (int32_t b : s.blocks) {
      if (b < 0 || b >= kv_.n_blocks) return absl::InvalidArgumentError(absl::StrCat("bad KV block id ", b));
    }
  }
  for (int32_t r : batch.out_rows) {
    if (r < 0 || r >= batch.n_tokens()) return absl::InvalidArgumentError("bad output row");
  }
  batch_ = &batch;
  if (!batch.fed.empty()) {
    if (batch.fed.size() != batch.tokens.size()) return absl::InvalidArgumentError("batch fed[] differs in length");
    // Host memory: the tokens an earlier Sample wrote are there already.
    fed_batch_ = batch;
    for (int t = 0; t < batch.n_tokens(); ++t) {
      if (batch.fed[t]) fed_batch_.tokens[t] = *batch.fed[t];
    }
    batch_ = &fed_batch_;
  }
  return absl::OkStatus();
}

void CpuBackend::Embed(const Weight& emb, float* out) {
  Flush();
  const Batch& b = *batch_;
  const size_t row_bytes = RowBytes(emb.type, emb.ne0);
  const auto* base = static_cast<const uint8_t*>(emb.data);
  pool_.ParallelFor(b.n_tokens(), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      DequantizeRow(emb.type, base + static_cast<size_t>(b.tokens[t]) * row_bytes, out + t * emb.ne0, emb.ne0);
    }
  });
}

void CpuBackend::RmsNorm(const float* x, const Weight& w, float eps, int rows, float* out) {
  Flush();
  const int dim = static_cast<int>(w.ne0);
  const float* g = static_cast<const float*>(w.data);
  pool_.ParallelFor(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      float* o = out + r * dim;
      const float s = RowRms(xr, dim, eps);
      for (int i = 0; i < dim; ++i) o[i] = xr[i] * s * g[i];
    }
  }, 4);
}

void CpuBackend::AddRmsNorm(float* x, const float* r, const Weight& w, float eps, int rows, float* out) {
  Flush();
  const int dim = static_cast<int>(w.ne0);
  const float* g = static_cast<const float*>(w.data);
  pool_.ParallelFor(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      float* xr = x + row * dim;
      const float* rr = r + row * dim;
      for (int i = 0; i < dim; ++i) xr[i] += rr[i];
      float* o = out + row * dim;
      const float s = RowRms(xr, dim, eps);
      for (int i = 0; i < dim; ++i) o[i] = xr[i] * s * g[i];
    }
  }, 4);
}

namespace {
bool Overlaps(const void* a, size_t an, const void* b, size_t bn) {
  const auto* pa = static_cast<const uint8_t*>(a);
  const auto* pb = static_cast<const uint8_t*>(b);
  return pa < pb + bn && pb < pa + an;
}
}  // namespace

void CpuBackend::MatMul(const Weight& w, const Weight* bias, const float* x, int n, float* y) {
  const bool float_act = float_activations_ || (!float_pattern_.empty() && (float_pattern_ == "all" ||
                                                                             w.name.find(float_pattern_) != std::string::npos));
  const size_t xb = sizeof(float) * static_cast<size_t>(n) * static_cast<size_t>(w.ne0);
  const size_t yb = sizeof(float) * static_cast<size_t>(n) * static_cast<size_t>(w.ne1);
  for (const PendingMatMul& m : pending_) {
    const size_t mxb = sizeof(float) * static_cast<size_t>(m.n) * static_cast<size_t>(m.w.ne0);
    const size_t myb = sizeof(float) * static_cast<size_t>(m.n) * static_cast<size_t>(m.w.ne1);
    if (Overlaps(x, xb, m.y, myb) || Overlaps(y, yb, m.y, myb) || Overlaps(y, yb, m.x, mxb)) {
      Flush();
      break;
    }
  }
  pending_.push_back({w, bias ? static_cast<const float*>(bias->data) : nullptr, x, n, y,
                      UsesInt8Activations(w.type) && !float_act, 0});
}

void CpuBackend::Flush() {
  if (pending_.empty()) return;
  // 1. Quantize each distinct int8 input once (same x, rows and format).
  size_t total = 0;
  std::vector<size_t> owners;
  for (size_t i = 0; i < pending_.size(); ++i) {
    PendingMatMul& m = pending_[i];
    if (!m.int8) continue;
    bool shared = false;
    for (size_t o : owners) {
      const PendingMatMul& q = pending_[o];
      if (q.x == m.x && q.n == m.n && q.w.ne0 == m.w.ne0 &&
          Int8ActBlock(q.w.type) == Int8ActBlock(m.w.type)) {
        m.xq_off = q.xq_off;
        shared = true;
        break;
      }
    }
    if (shared) continue;
    m.xq_off = total;
    total += Int8ActRowBytes(m.w.type, m.w.ne0) * static_cast<size_t>(m.n);
    owners.push_back(i);
  }
  if (act_q_bytes_ < total) {
    act_q_bytes_ = total;
    act_q_.reset(new uint8_t[act_q_bytes_ + 64]);
    mem_.other = act_q_bytes_ + 64;
  }
  uint8_t* xq = act_q_ ? act_q_.get() + ((64 - reinterpret_cast<uintptr_t>(act_q_.get()) % 64) % 64) : nullptr;
  if (!owners.empty()) {
    // (owner, token) pairs
    std::vector<std::pair<size_t, int>> rows;
    for (size_t o : owners)
      for (int t = 0; t < pending_[o].n; ++t) rows.push_back({o, t});
    auto quantize = [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const PendingMatMul& m = pending_[rows[i].first];
        const int64_t in = m.w.ne0;
        const size_t xs = Int8ActRowBytes(m.w.type, in);
        QuantizeInt8Activations(m.w.type, m.x + rows[i].second * in, in, xq + m.xq_off + rows[i].second * xs);
      }
    };
    if (rows.size() >= 8) pool_.ParallelFor(static_cast<int64_t>(rows.size()), quantize);
    else quantize(0, static_cast<int64_t>(rows.size()));
  }
  // 2. One ParallelFor over all jobs' blocks of kRowBlock rows.
  std::vector<std::pair<size_t, int64_t>> units;  // (job, first row)
  for (size_t i = 0; i < pending_.size(); ++i)
    for (int64_t r = 0; r < pending_[i].w.ne1; r += kRowBlock) units.push_back({i, r});
  pool_.ParallelFor(static_cast<int64_t>(units.size()), [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const PendingMatMul& m = pending_[units[u].first];
      const int64_t in = m.w.ne0, out_dim = m.w.ne1, n = m.n;
      const int64_t rb = units[u].second, re = std::min(out_dim, rb + kRowBlock);
      const size_t row_bytes = RowBytes(m.w.type, in);
      for (int64_t t0 = 0; t0 < n; t0 += kTokenTile) {
        const int64_t nt = std::min<int64_t>(kTokenTile, n - t0);
        if (m.int8) {
          const size_t xs = Int8ActRowBytes(m.w.type, in);
          DotRowsInt8(m.w.type, m.w.data, row_bytes, in, rb, re, xq + m.xq_off + t0 * xs, xs, nt,
                      m.y + t0 * out_dim, out_dim);
        } else {
          DotRowsBatched(m.w.type, m.w.data, row_bytes, in, rb, re, m.x + t0 * in, in, nt, m.y + t0 * out_dim,
                         out_dim);
        }
      }
      if (m.bias) {
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t r = rb; r < re; ++r) m.y[t * out_dim + r] += m.bias[r];
        }
      }
    }
  });
  pending_.clear();
}

absl::Status CpuBackend::Synchronize() {
  Flush();
  return absl::OkStatus();
}

void CpuBackend::Rope(float* x, int n_heads, int head_dim, const RopeParams& p) {
  Flush();
  const Batch& b = *batch_;
  const int half = p.n_dims / 2;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i)
    inv_freq[i] = std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.n_dims) * p.freq_scale;
  pool_.ParallelFor(b.n_tokens(), [&](int64_t t0, int64_t t1) {
    std::vector<float> cs(half), sn(half);
    for (int64_t t = t0; t < t1; ++t) {
      const double pos = b.pos[t];
      for (int i = 0; i < half; ++i) {
        const double a = pos * inv_freq[i];
        cs[i] = static_cast<float>(std::cos(a));
        sn[i] = static_cast<float>(std::sin(a));
      }
      for (int h = 0; h < n_heads; ++h) {
        float* v = x + (t * n_heads + h) * static_cast<int64_t>(head_dim);
        for (int i = 0; i < half; ++i) {
          // Normal (llama): rotate adjacent pairs; NeoX (qwen): rotate halves.
          const int i0 = p.style == RopeStyle::kNeox ? i : 2 * i;
          const int i1 = p.style == RopeStyle::kNeox ? i + half : 2 * i + 1;
          const float a = v[i0], c = v[i1];
          v[i0] = a * cs[i] - c * sn[i];
          v[i1] = a * sn[i] + c * cs[i];
        }
      }
    }
  });
}

uint8_t* CpuBackend::KvRow(int layer, bool is_v, const BatchSeq& s, int pos, int kv_head) const {
  const int bs = kv_.block_size;
  uint8_t* base = (is_v ? v_pool_ : k_pool_)[layer].get();
  const size_t block = static_cast<size_t>(s.blocks[pos / bs]);
  return base + block * kv_.BlockBytes() + (static_cast<size_t>(kv_head) * bs + pos % bs) * kv_row_bytes_;
}

void CpuBackend::Attention(const float* q, const float* k, const float* v, const AttentionParams& p, float* out) {
  Flush();
  const Batch& b = *batch_;
  const int n = b.n_tokens();
  const int hd = p.head_dim;
  const int kvd = p.n_kv_heads * hd;
  const int group = p.n_heads / p.n_kv_heads;
  // 1. Store this batch's keys and values at their (sequence, position).
  pool_.ParallelFor(n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const BatchSeq& s = b.seqs[b.seq_index[t]];
      for (int h = 0; h < p.n_kv_heads; ++h) {
        const float* kr = k + t * kvd + h * hd;
        const float* vr = v + t * kvd + h * hd;
        uint8_t* kd = KvRow(p.layer, false, s, b.pos[t], h);
        uint8_t* vd = KvRow(p.layer, true, s, b.pos[t], h);
        if (kv_.type == GgmlType::F32) {
          std::memcpy(kd, kr, sizeof(float) * hd);
          std::memcpy(vd, vr, sizeof(float) * hd);
        } else {
          (void)QuantizeRow(kv_.type, kr, kd, hd);
          (void)QuantizeRow(kv_.type, vr, vd, hd);
        }
      }
    }
  });
  // 2. Causal attention. A work item is (sequence, kv head, up to
  // kAttnTokens of the sequence's batch tokens): the item walks the KV in
  // blocks of 16 positions, decoding each K and V row once for all
  // its tokens and all query heads of the group (a verify of k+1 tokens reads
  // the context once, not k+1 times). Per token the arithmetic is the same
  // sequence as for a lone token: scores in position order, softmax, then the
  // weighted V sum in position order, so batching changes no bit.
  constexpr int kAttnTokens = 8;
  struct Item {
    int seq, kvh, t0, nt;  // tokens: seq_tokens[seq][t0 .. t0 + nt)
  };
  std::vector<std::vector<int>> seq_tokens(b.seqs.size());
  for (int t = 0; t < n; ++t) seq_tokens[b.seq_index[t]].push_back(t);
  std::vector<Item> items;
  for (int si = 0; si < static_cast<int>(seq_tokens.size()); ++si) {
    const int nt_seq = static_cast<int>(seq_tokens[si].size());
    for (int t0 = 0; t0 < nt_seq; t0 += kAttnTokens)
      for (int h = 0; h < p.n_kv_heads; ++h) items.push_back({si, h, t0, std::min(kAttnTokens, nt_seq - t0)});
  }
  constexpr int bs = 16;  // KV positions decoded per step
  pool_.ParallelFor(static_cast<int64_t>(items.size()), [&](int64_t i0, int64_t i1) {
    std::vector<float> kbuf(static_cast<size_t>(bs) * hd), vbuf(static_cast<size_t>(bs) * hd);
    std::vector<float> scores, acc;
    const float* krows[bs];
    for (int64_t it = i0; it < i1; ++it) {
      const Item& item = items[it];
      const BatchSeq& s = b.seqs[item.seq];
      const int* toks = seq_tokens[item.seq].data() + item.t0;
      int maxlen = 0;
      for (int i = 0; i < item.nt; ++i) maxlen = std::max(maxlen, b.pos[toks[i]] + 1);
      // scores[(i * group + g) * maxlen + j], acc[(i * group + g) * hd + d]
      scores.assign(static_cast<size_t>(item.nt) * group * maxlen, 0.0f);
      acc.assign(static_cast<size_t>(item.nt) * group * hd, 0.0f);
      for (int j0 = 0; j0 < maxlen; j0 += bs) {
        const int j1 = std::min(maxlen, j0 + bs);
        for (int j = j0; j < j1; ++j)
          krows[j - j0] = KvRowFloats(kv_.type, KvRow(p.layer, false, s, j, item.kvh), kbuf.data() + (j - j0) * hd, hd);
        for (int i = 0; i < item.nt; ++i) {
          const int t = toks[i];
          const int len = b.pos[t] + 1;
          const int je = std::min(j1, len);
          for (int g = 0; g < group; ++g) {
            const float* qh = q + (static_cast<int64_t>(t) * p.n_heads + item.kvh * group + g) * hd;
            float* sc = scores.data() + (static_cast<size_t>(i) * group + g) * maxlen;
            if (je > j0) cpu_detail::ScoreRows(qh, krows, je - j0, hd, p.scale, sc + j0);
          }
        }
      }
      for (int i = 0; i < item.nt; ++i) {
        const int len = b.pos[toks[i]] + 1;
        for (int g = 0; g < group; ++g) {
          float* sc = scores.data() + (static_cast<size_t>(i) * group + g) * maxlen;
          float mx = -INFINITY;
          for (int j = 0; j < len; ++j) mx = std::max(mx, sc[j]);
          double sum = 0;
          for (int j = 0; j < len; ++j) {
            sc[j] = std::exp(sc[j] - mx);
            sum += sc[j];
          }
          const float inv = static_cast<float>(1.0 / sum);
          for (int j = 0; j < len; ++j) sc[j] *= inv;
        }
      }
      for (int j0 = 0; j0 < maxlen; j0 += bs) {
        const int j1 = std::min(maxlen, j0 + bs);
        for (int j = j0; j < j1; ++j)
          krows[j - j0] = KvRowFloats(kv_.type, KvRow(p.layer, true, s, j, item.kvh), vbuf.data() + (j - j0) * hd, hd);
        for (int i = 0; i < item.nt; ++i) {
          const int je = std::min(j1, b.pos[toks[i]] + 1);
          for (int g = 0; g < group; ++g) {
            const float* sc = scores.data() + (static_cast<size_t>(i) * group + g) * maxlen;
            float* a = acc.data() + (static_cast<size_t>(i) * group + g) * hd;
            if (je > j0) cpu_detail::AccumRows(sc + j0, krows, je - j0, hd, a);
          }
        }
      }
      for (int i = 0; i < item.nt; ++i) {
        const int t = toks[i];
        for (int g = 0; g < group; ++g) {
          float* o = out + (static_cast<int64_t>(t) * p.n_heads + item.kvh * group + g) * hd;
          std::memcpy(o, acc.data() + (static_cast<size_t>(i) * group + g) * hd, sizeof(float) * hd);
        }
      }
    }
  });
}

void CpuBackend::SwiGLU(const float* gate, const float* up, int n, int dim, float* out) {
  Flush();
  const int64_t total = static_cast<int64_t>(n) * dim;
  pool_.ParallelFor(total, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float g = gate[i];
      out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
  }, 4096);
}

void CpuBackend::Add(float* x, const float* y, int64_t n) {
  Flush();
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void CpuBackend::GatherOutRows(const float* x, int dim, float* out) {
  Flush();
  const Batch& b = *batch_;
  for (int i = 0; i < b.n_out(); ++i) {
    std::memmove(out + static_cast<size_t>(i) * dim, x + static_cast<size_t>(b.out_rows[i]) * dim, sizeof(float) * dim);
  }
}

double CpuBackend::MeasureCopyBandwidth(size_t bytes) {
  Flush();
  // All threads copy disjoint halves of a large buffer; best of five.
  const size_t n = bytes / 2;
  std::unique_ptr<uint8_t[]> a(new (std::nothrow) uint8_t[n]), b(new (std::nothrow) uint8_t[n]);
  if (!a || !b) return 0.0;
  std::memset(a.get(), 1, n);
  std::memset(b.get(), 2, n);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    pool_.ParallelFor(static_cast<int64_t>(n), [&](int64_t i0, int64_t i1) {
      std::memcpy(b.get() + i0, a.get() + i0, static_cast<size_t>(i1 - i0));
    }, 4096);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * static_cast<double>(n) / s);
  }
  return best;
}

absl::Status CpuBackend::ReadToHost(const float* src, float* host, size_t n) {
  Flush();
  if (src != host) std::memcpy(host, src, n * sizeof(float));
  return absl::OkStatus();
}

}  // namespace specd
