// Row and elementwise kernels: embedding lookup, (add +) RMSNorm, RoPE, SwiGLU,
// residual add, output-row gather, bias, dequantization to F16/F32 tiles, and
// random weight fill. Every per-element formula rounds like the CPU backend
// (explicit _rn intrinsics: no contraction), and no result depends on how many
// rows or tokens a launch covers.
#include <algorithm>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/backend/cuda/k_common.cuh"
#include "common/quant/block_dequant.h"
#include "common/quant/block_random.h"

namespace specd::cuda {
namespace {

DeviceInfo g_info;
Tuning g_tuning;

// Dequantizes block `b` of a row of `type` into y (block_size floats).
template <GgmlType T>
__device__ __forceinline__ void DequantBlockT(const uint8_t* src, float* y) {
  if constexpr (T == GgmlType::Q4_0) DequantBlockQ4_0(*reinterpret_cast<const BlockQ4_0*>(src), y);
  else if constexpr (T == GgmlType::Q4_1) DequantBlockQ4_1(*reinterpret_cast<const BlockQ4_1*>(src), y);
  else if constexpr (T == GgmlType::Q5_0) DequantBlockQ5_0(*reinterpret_cast<const BlockQ5_0*>(src), y);
  else if constexpr (T == GgmlType::Q5_1) DequantBlockQ5_1(*reinterpret_cast<const BlockQ5_1*>(src), y);
  else if constexpr (T == GgmlType::Q8_0) DequantBlockQ8_0(*reinterpret_cast<const BlockQ8_0*>(src), y);
  else if constexpr (T == GgmlType::Q2_K) DequantBlockQ2_K(*reinterpret_cast<const BlockQ2_K*>(src), y);
  else if constexpr (T == GgmlType::Q3_K) DequantBlockQ3_K(*reinterpret_cast<const BlockQ3_K*>(src), y);
  else if constexpr (T == GgmlType::Q4_K) DequantBlockQ4_K(*reinterpret_cast<const BlockQ4_K*>(src), y);
  else if constexpr (T == GgmlType::Q5_K) DequantBlockQ5_K(*reinterpret_cast<const BlockQ5_K*>(src), y);
  else if constexpr (T == GgmlType::Q6_K) DequantBlockQ6_K(*reinterpret_cast<const BlockQ6_K*>(src), y);
  else if constexpr (T == GgmlType::F32) y[0] = *reinterpret_cast<const float*>(src);
  else if constexpr (T == GgmlType::F16) y[0] = H2F(*reinterpret_cast<const uint16_t*>(src));
  else if constexpr (T == GgmlType::BF16) y[0] = Bf16ToFloat(*reinterpret_cast<const uint16_t*>(src));
}

template <GgmlType T> struct Geo;
#define SPECD_GEO(T, QK, BYTES)                 \
  template <> struct Geo<GgmlType::T> {        \
    static constexpr int kQk = QK;             \
    static constexpr int kBytes = BYTES;       \
  };
SPECD_GEO(Q4_0, 32, 18)
SPECD_GEO(Q4_1, 32, 20)
SPECD_GEO(Q5_0, 32, 22)
SPECD_GEO(Q5_1, 32, 24)
SPECD_GEO(Q8_0, 32, 34)
SPECD_GEO(Q2_K, 256, 84)
SPECD_GEO(Q3_K, 256, 110)
SPECD_GEO(Q4_K, 256, 144)
SPECD_GEO(Q5_K, 256, 176)
SPECD_GEO(Q6_K, 256, 210)
SPECD_GEO(F32, 1, 4)
SPECD_GEO(F16, 1, 2)
SPECD_GEO(BF16, 1, 2)
#undef SPECD_GEO

// Calls f.template operator()<T>() for the computable type `t`; false if none.
template <class F>
bool Dispatch(GgmlType t, F&& f) {
  switch (t) {
#define SPECD_CASE(T) \
  case GgmlType::T: f.template operator()<GgmlType::T>(); return true;
    SPECD_CASE(Q4_0) SPECD_CASE(Q4_1) SPECD_CASE(Q5_0) SPECD_CASE(Q5_1) SPECD_CASE(Q8_0)
    SPECD_CASE(Q2_K) SPECD_CASE(Q3_K) SPECD_CASE(Q4_K) SPECD_CASE(Q5_K) SPECD_CASE(Q6_K)
    SPECD_CASE(F32) SPECD_CASE(F16) SPECD_CASE(BF16)
#undef SPECD_CASE
    default: return false;
  }
}

// Float formats only: quantized matrices are stored packed (k_matvec.cu).
template <class F>
bool DispatchFloat(GgmlType t, F&& f) {
  switch (t) {
    case GgmlType::F32: f.template operator()<GgmlType::F32>(); return true;
    case GgmlType::F16: f.template operator()<GgmlType::F16>(); return true;
    case GgmlType::BF16: f.template operator()<GgmlType::BF16>(); return true;
    default: return false;
  }
}

// ---- embedding ----
template <GgmlType T>
__global__ void EmbedKernel(const uint8_t* emb, int64_t ne0, size_t row_bytes, const int32_t* tokens, float* out) {
  GridDepWait();  // programmatic dependent launch: inputs are ready after this
  GridDepLaunch();
  const int t = blockIdx.y;
  const int64_t nb = ne0 / Geo<T>::kQk;
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= nb) return;
  const uint8_t* src = emb + static_cast<size_t>(tokens[t]) * row_bytes + static_cast<size_t>(b) * Geo<T>::kBytes;
  float y[Geo<T>::kQk];
  DequantBlockT<T>(src, y);
  float* o = out + static_cast<int64_t>(t) * ne0 + b * Geo<T>::kQk;
#pragma unroll 8
  for (int i = 0; i < Geo<T>::kQk; ++i) o[i] = y[i];
}

// ---- RMSNorm ----
// Blocks of 8 warps, a lane per element of a group of 256, which the block
// normalises and quantizes (QuantizeGroupBlock). A few rows (decode, verify)
// take a block per (group, row), so that a row's groups run on as many SMs,
// each a short chain (one block of a warp per group took 8 us per launch in
// isolation, round 15); more rows than fit in one wave of blocks take several
// groups a block, in turn (gpb: groups per block; prefill: a block per row),
// since each block sums the whole row's squares itself (a six-sequence
// verify's 30 rows of 5120 took 600 blocks, three waves at two blocks an SM:
// 15.7 us a launch against 6.9 for 7 rows, round 19's ncu): in double like
// the CPU backend and in a fixed order
// (a thread's elements, lanes, warps), so every block holds the same sum and
// the split does not change a bit. No block may write x (the residual add,
// or an in-place norm) while another still reads it: the last block of the
// row to finish (a counter per row, left at zero) writes those; out
// elsewhere is written by each block for its own groups.
constexpr int kNormRegs = 32;  // rows of up to 32 x 256 elements stay in the last block's registers
template <bool kAdd>
__global__ void __launch_bounds__(mmv::kGroup) RmsNormKernel(float* x, const float* add, const float* w, float eps,
                                                            int dim, int gpb, float* out, uint8_t* xq, int* counters) {
  __shared__ double part[mmv::kGroup / 32];
  __shared__ float s_am[8];
  __shared__ int s_sum[16];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t groups = mmv::Groups(dim), bpr = (groups + gpb - 1) / gpb;
  const int64_t row = blockIdx.x / bpr, g0 = blockIdx.x % bpr * gpb, g1 = min(groups, g0 + gpb);
  const int64_t own = g0 * mmv::kGroup + tid;  // a block per group: its weight, read before the wait
  const float w_own = gpb == 1 && own < dim ? w[own] : 0.0f;
  GridDepWait();  // programmatic dependent launch: inputs are ready after this
  GridDepLaunch();
  float* xr = x + row * dim;
  const float* ar = kAdd ? add + row * dim : nullptr;
  auto elem = [&](int64_t i) { return i < dim ? (kAdd ? __fadd_rn(xr[i], ar[i]) : xr[i]) : 0.0f; };
  float vr[kNormRegs];
  double ss = 0;
#pragma unroll
  for (int r = 0; r < kNormRegs; ++r) {
    vr[r] = r < groups ? elem(r * mmv::kGroup + tid) : 0.0f;
    ss = __fma_rn(static_cast<double>(vr[r]), static_cast<double>(vr[r]), ss);
  }
  for (int64_t r = kNormRegs; r < groups; ++r) {
    const float v = elem(r * mmv::kGroup + tid);
    ss = __fma_rn(static_cast<double>(v), static_cast<double>(v), ss);
  }
  ss = WarpSumD(ss);
  if (lane == 0) part[warp] = ss;
  __syncthreads();
  double total = 0;
#pragma unroll
  for (int i = 0; i < mmv::kGroup / 32; ++i) total = __dadd_rn(total, part[i]);
  const float s = static_cast<float>(1.0 / sqrt(total / dim + static_cast<double>(eps)));
  float* o = out + row * dim;
  const bool in_place = out == x;
  for (int64_t g = g0; g < g1; ++g) {  // every thread: the quantizer's barriers
    const int64_t i = g * mmv::kGroup + tid;
    const float v = i < dim ? __fmul_rn(__fmul_rn(elem(i), s), gpb == 1 ? w_own : w[i]) : 0.0f;
    if (i < dim && !in_place) o[i] = v;
    if (xq) QuantizeGroupBlock(v, static_cast<int>(row), g, groups, xq, s_am, s_sum);
  }
  if (!kAdd && !in_place) return;
  // The last block of the row writes x (x + add) and an in-place output.
  if (!LastBlockArrives(counters + row, static_cast<int>(bpr))) return;
  auto finish = [&](int64_t i, float xi) {
    if (i >= dim) return;
    if (kAdd) xr[i] = xi;
    if (in_place) o[i] = __fmul_rn(__fmul_rn(xi, s), w[i]);
  };
#pragma unroll
  for (int r = 0; r < kNormRegs; ++r)
    if (r < groups) finish(r * mmv::kGroup + tid, vr[r]);
  for (int64_t r = kNormRegs; r < groups; ++r) finish(r * mmv::kGroup + tid, elem(r * mmv::kGroup + tid));
}

// ---- RoPE (with optional per-head RMSNorm) ----
// One warp per (token, head), lane L holding elements L + 32 k in registers:
// normalise the head (sums of squares in double, as RmsNorm), then rotate its
// pairs, the partners read from the warp's copy of the head in shared memory;
// each lane computes the angles of pairs L + 32 j (double sincos) before the
// inputs are ready (positions and frequencies are no kernel's output), and
// the warp shares them the same way. With a KV write, K's warps then store
// their rotated rows in the cache from registers and n_kv more warps per
// token store V's. One global round trip for the head (round 15's kernel
// re-read it twice: 7.4 us a launch in ncu, most of it waiting on loads).
constexpr int kRopeWarps = 4, kRopeMaxHd = 256, kRopePer = kRopeMaxHd / 32;
__global__ void __launch_bounds__(32 * kRopeWarps)
    RopeKernel(RopeSeg s0, RopeSeg s1, int head_dim, int n_dims, bool neox, float eps, const double* inv_freq,
               BatchDev b, RopeKvWrite kw) {
  __shared__ float s_x[kRopeWarps][kRopeMaxHd];
  __shared__ float s_cs[kRopeWarps][kRopeMaxHd / 2], s_sn[kRopeWarps][kRopeMaxHd / 2];
  const int t = blockIdx.x, wi = threadIdx.x / 32;
  const int hh = blockIdx.y * kRopeWarps + wi;
  const int n_rot = s0.n_heads + s1.n_heads;
  const int n_k = kw.k_seg == 0 ? s0.n_heads : kw.k_seg == 1 ? s1.n_heads : 0;
  if (hh >= n_rot + n_k) {
    GridDepWait();
    GridDepLaunch();
    return;
  }
  const int lane = threadIdx.x & 31;
  const int half = n_dims / 2;
  const int seg = hh < s0.n_heads ? 0 : 1;
  uint8_t* row = nullptr;  // the KV row this warp stores (K or V head), found before the wait
  if (hh >= n_rot || seg == kw.k_seg) {
    const int32_t* bt = b.blocks + static_cast<size_t>(b.seq[t]) * b.bt_stride;
    row = const_cast<uint8_t*>(KvRow(hh >= n_rot ? kw.kv.v : kw.kv.k, kw.kv, bt, b.pos[t],
                                     hh >= n_rot ? hh - n_rot : (seg == 0 ? hh : hh - s0.n_heads)));
  }
  if (hh < n_rot) {
    const double p = b.pos[t];
    for (int i = lane; i < half; i += 32) {
      double sv, cv;
      sincos(p * inv_freq[i], &sv, &cv);
      s_cs[wi][i] = static_cast<float>(cv);
      s_sn[wi][i] = static_cast<float>(sv);
    }
  }
  GridDepWait();  // programmatic dependent launch: inputs are ready after this
  GridDepLaunch();
  if (hh >= n_rot) {  // V head hh - n_rot
    const float* x = kw.v + (static_cast<int64_t>(t) * n_k + hh - n_rot) * head_dim;
    float v[kRopePer];
#pragma unroll
    for (int k = 0; k < kRopePer; ++k) v[k] = 32 * k + lane < head_dim ? x[32 * k + lane] : 0.0f;
#pragma unroll
    for (int k = 0; k < kRopePer; ++k)
      if (32 * k < head_dim) StoreKvBlockWarp(row, kw.kv.type, k, head_dim, v[k]);
    return;
  }
  const RopeSeg sg = seg == 0 ? s0 : s1;
  const int h = seg == 0 ? hh : hh - s0.n_heads;
  float* x = sg.x + (static_cast<int64_t>(t) * sg.n_heads + h) * head_dim;
  float v[kRopePer], nw[kRopePer];
#pragma unroll
  for (int k = 0; k < kRopePer; ++k) {
    const int e = 32 * k + lane;
    v[k] = e < head_dim ? x[e] : 0.0f;
    nw[k] = sg.norm && e < head_dim ? sg.norm[e] : 0.0f;
  }
  if (sg.norm) {
    double ss = 0;
#pragma unroll
    for (int k = 0; k < kRopePer; ++k)
      if (32 * k + lane < head_dim) ss = __fma_rn(static_cast<double>(v[k]), static_cast<double>(v[k]), ss);
    ss = WarpSumD(ss);
    const float sc = static_cast<float>(1.0 / sqrt(ss / head_dim + static_cast<double>(eps)));
#pragma unroll
    for (int k = 0; k < kRopePer; ++k) v[k] = __fmul_rn(__fmul_rn(v[k], sc), nw[k]);
  }
#pragma unroll
  for (int k = 0; k < kRopePer; ++k)
    if (32 * k + lane < head_dim) s_x[wi][32 * k + lane] = v[k];
  __syncwarp();
  // Element e of pair i: (a, c) = (x[i0], x[i1]) -> (a cs - c sn, a sn + c cs).
#pragma unroll
  for (int k = 0; k < kRopePer; ++k) {
    const int e = 32 * k + lane;
    if (e >= n_dims) continue;
    const int i = neox ? (e < half ? e : e - half) : e >> 1;
    const bool first = neox ? e < half : (e & 1) == 0;
    const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
    const float a = s_x[wi][i0], c = s_x[wi][i1], cs = s_cs[wi][i], sn = s_sn[wi][i];
    v[k] = first ? __fsub_rn(__fmul_rn(a, cs), __fmul_rn(c, sn)) : __fadd_rn(__fmul_rn(a, sn), __fmul_rn(c, cs));
  }
#pragma unroll
  for (int k = 0; k < kRopePer; ++k)
    if (32 * k + lane < head_dim) x[32 * k + lane] = v[k];
  if (row) {
#pragma unroll
    for (int k = 0; k < kRopePer; ++k)
      if (32 * k < head_dim) StoreKvBlockWarp(row, kw.kv.type, k, head_dim, v[k]);
  }
}

__device__ __forceinline__ float Silu(float g, float u) {
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

__global__ void SwiGLUKernel(const float* gate, const float* up, int64_t n, float* out) {
  GridDepWait();  // programmatic dependent launch: inputs are ready after this
  GridDepLaunch();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = Silu(gate[i], up[i]);
}

// One block of 8 warps per (row, group of 256), a lane per element, also
// quantizing the group (QuantizeGroupBlock).
__global__ void __launch_bounds__(mmv::kGroup) SwiGLUQuantKernel(const float* gate, const float* up, int dim,
                                                                 float* out, uint8_t* xq) {
  __shared__ float s_am[8];
  __shared__ int s_sum[16];
  GridDepWait();  // programmatic dependent launch: inputs are ready after this
  GridDepLaunch();
  const int64_t groups = mmv::Groups(dim);
  const int64_t row = blockIdx.x / groups, g = blockIdx.x % groups;
  const int64_t i = g * mmv::kGroup + threadIdx.x, idx = row * dim + i;
  float v = 0.0f;
  if (i < dim) {
    v = Silu(gate[idx], up[idx]);
    out[idx] = v;
  }
  QuantizeGroupBlock(v, static_cast<int>(row), g, groups, xq, s_am, s_sum);
}

__global__ void AddKernel(float* x, const float* y, int64_t n) {
  GridDepWait();  // programmatic dependent launch: inputs are ready after this
  GridDepLaunch();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = __fadd_rn(x[i], y[i]);
}

__global__ void GatherKernel(const float* x, int dim, const int32_t* rows, float* out) {
  GridDepWait();  // programmatic dependent launch: inputs are ready after this
  GridDepLaunch();
  const int64_t i = blockIdx.x;
  const float* src = x + static_cast<int64_t>(rows[i]) * dim;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) out[i * dim + j] = src[j];
}

__global__ void AddBiasKernel(float* y, const float* bias, int rows, int64_t ldy) {
  GridDepWait();  // programmatic dependent launch: inputs are ready after this
  GridDepLaunch();
  const int c = blockIdx.y;
  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += gridDim.x * blockDim.x)
    y[c * ldy + r] = __fadd_rn(y[c * ldy + r], bias[r]);
}

// ---- dequantization to tiles ----
template <GgmlType T>
__global__ void DequantRowsKernel(const uint8_t* w, size_t row_bytes, int64_t r0, int64_t nrows, int64_t k,
                                  void* dst, bool to_f16) {
  const int64_t nb = k / Geo<T>::kQk;
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= nb * nrows) return;
  const int64_t r = idx / nb, b = idx % nb;
  float y[Geo<T>::kQk];
  DequantBlockT<T>(w + static_cast<size_t>(r0 + r) * row_bytes + static_cast<size_t>(b) * Geo<T>::kBytes, y);
  const int64_t o = r * k + b * Geo<T>::kQk;
  if (to_f16) {
    __half* d = static_cast<__half*>(dst) + o;
#pragma unroll 8
    for (int i = 0; i < Geo<T>::kQk; ++i) d[i] = __float2half_rn(y[i]);
  } else {
    float* d = static_cast<float*>(dst) + o;
#pragma unroll 8
    for (int i = 0; i < Geo<T>::kQk; ++i) d[i] = y[i];
  }
}

__global__ void ToHalfKernel(const float* x, int64_t n, __half* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __float2half_rn(fminf(fmaxf(x[i], -65504.0f), 65504.0f));
}

// ---- random weights (block_random.h: the same bytes as the CPU backend's) ----
template <GgmlType T>
__global__ void RandomFillKernel(uint8_t* dst, int64_t block0, int64_t nblocks, uint64_t seed, float sigma,
                                 float mean) {
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < nblocks;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint8_t* p = dst + b * Geo<T>::kBytes;
    RandomBlock<T>(p, seed, block0 + b, sigma);
    if constexpr (T == GgmlType::F32) {
      if (mean != 0.0f) *reinterpret_cast<float*>(p) += mean;
    }
  }
}

int GridFor(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<int>(b < 65535 * 16 ? (b < 1 ? 1 : b) : 65535 * 16);
}

}  // namespace

void SetDeviceInfo(const DeviceInfo& d) { g_info = d; }
const DeviceInfo& GetDeviceInfo() { return g_info; }

void SetTuning(const Tuning& t) {
  g_tuning = t;
  if (g_tuning.attn_split < kAttnSub || g_tuning.attn_split % kAttnSub != 0) g_tuning.attn_split = kAttnSplit;
  if (g_tuning.attn_kernel != 1) g_tuning.attn_kernel = 2;
}
const Tuning& GetTuning() { return g_tuning; }

cudaError_t LaunchEmbed(GgmlType type, const void* emb, int64_t ne0, const BatchDev& b, float* out, cudaStream_t s) {
  const size_t row_bytes = RowBytes(type, ne0);
  const bool ok = DispatchFloat(type, [&]<GgmlType T>() {
    const int64_t nb = ne0 / Geo<T>::kQk;
    const int threads = Geo<T>::kQk == 1 ? 256 : 64;
    dim3 grid(CeilDiv(nb, threads), b.n_tokens);
    LaunchPdl(EmbedKernel<T>, dim3(grid), dim3(threads), 0, s, static_cast<const uint8_t*>(emb), ne0, row_bytes, b.tokens, out);
  });
  return ok ? LaunchResult() : cudaErrorInvalidValue;
}

namespace {
// RmsNormKernel blocks the device runs at once (PrepareMiscKernels).
int64_t g_norm_resident = 0;
}  // namespace

cudaError_t PrepareMiscKernels() {
  int per_sm = 0, sms = GetDeviceInfo().sm_count, dev = 0;
  cudaError_t e = cudaSuccess;
  if (sms <= 0 && (e = cudaGetDevice(&dev)) == cudaSuccess)
    e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, RmsNormKernel<true>, mmv::kGroup, 0);
  if (e == cudaSuccess) g_norm_resident = std::max<int64_t>(int64_t{per_sm} * sms, 1);
  return e;
}

cudaError_t LaunchRmsNorm(float* x, const float* add, const float* w, float eps, int rows, int dim, float* out,
                          void* xq_v, int* counters, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  if ((add || out == x) && !counters) return cudaErrorInvalidValue;
  uint8_t* xq = static_cast<uint8_t*>(xq_v);
  // A block per group while that fits in one wave; past it as few groups a
  // block as keep it in one (each block reads its whole row for the sum).
  const int64_t resident = g_norm_resident > 0 ? g_norm_resident : std::max(GetDeviceInfo().sm_count, 1);
  const int64_t groups = mmv::Groups(dim);
  const int gpb = static_cast<int>(std::clamp<int64_t>(CeilDiv(int64_t{rows} * groups, resident), 1, groups));
  const dim3 grid(static_cast<unsigned>(rows * ((groups + gpb - 1) / gpb)));
  if (add) LaunchPdl(RmsNormKernel<true>, grid, dim3(mmv::kGroup), 0, s, x, add, w, eps, dim, gpb, out, xq, counters);
  else LaunchPdl(RmsNormKernel<false>, grid, dim3(mmv::kGroup), 0, s, x, add, w, eps, dim, gpb, out, xq, counters);
  return LaunchResult();
}

cudaError_t LaunchRope(const RopeSeg* segs, int n_segs, int head_dim, int n_dims, bool neox, float eps,
                       const double* inv_freq, const BatchDev& b, const RopeKvWrite& kv_write, cudaStream_t s) {
  if (b.n_tokens <= 0 || n_segs < 1 || n_segs > 2) return n_segs >= 1 && n_segs <= 2 ? cudaSuccess : cudaErrorInvalidValue;
  if (kv_write.k_seg >= n_segs) return cudaErrorInvalidValue;
  const RopeSeg none{};
  const int n_k = kv_write.k_seg < 0 ? 0 : segs[kv_write.k_seg].n_heads;
  const int warps = segs[0].n_heads + (n_segs > 1 ? segs[1].n_heads : 0) + n_k;
  if (head_dim > kRopeMaxHd || n_dims > head_dim) return cudaErrorInvalidValue;
  LaunchPdl(RopeKernel, dim3(b.n_tokens, CeilDiv(warps, kRopeWarps)), dim3(32 * kRopeWarps), 0, s, segs[0],
            n_segs > 1 ? segs[1] : none,
            head_dim, n_dims, neox, eps, inv_freq, b, kv_write);
  return LaunchResult();
}

cudaError_t LaunchSwiGLU(const float* gate, const float* up, int n, int dim, float* out, void* xq, cudaStream_t s) {
  const int64_t total = static_cast<int64_t>(n) * dim;
  if (total <= 0) return cudaSuccess;
  if (xq) {
    LaunchPdl(SwiGLUQuantKernel, dim3(static_cast<unsigned>(n * mmv::Groups(dim))), dim3(mmv::kGroup), 0, s, gate, up,
              dim, out, static_cast<uint8_t*>(xq));
  } else {
    LaunchPdl(SwiGLUKernel, dim3(GridFor(total, 256)), dim3(256), 0, s, gate, up, total, out);
  }
  return LaunchResult();
}

cudaError_t LaunchAdd(float* x, const float* y, int64_t n, cudaStream_t s) {
  LaunchPdl(AddKernel, dim3(GridFor(n, 256)), dim3(256), 0, s, x, y, n);
  return LaunchResult();
}

cudaError_t LaunchGather(const float* x, int dim, const BatchDev& b, float* out, cudaStream_t s) {
  if (b.n_out <= 0) return cudaSuccess;
  LaunchPdl(GatherKernel, dim3(b.n_out), dim3(256), 0, s, x, dim, b.out_rows, out);
  return LaunchResult();
}

cudaError_t LaunchAddBias(float* y, const float* bias, int n, int rows, int64_t ldy, cudaStream_t s) {
  dim3 grid(CeilDiv(rows, 256), n);
  LaunchPdl(AddBiasKernel, dim3(grid), dim3(256), 0, s, y, bias, rows, ldy);
  return LaunchResult();
}

cudaError_t LaunchDequantRows(GgmlType type, const void* w, size_t row_bytes, int64_t r0, int64_t nrows, int64_t k,
                              void* dst, bool to_f16, cudaStream_t s) {
  const bool ok = DispatchFloat(type, [&]<GgmlType T>() {
    const int64_t total = (k / Geo<T>::kQk) * nrows;
    const int threads = Geo<T>::kQk == 1 ? 256 : 64;
    DequantRowsKernel<T><<<CeilDiv(total, threads), threads, 0, s>>>(static_cast<const uint8_t*>(w), row_bytes, r0,
                                                                     nrows, k, dst, to_f16);
  });
  return ok ? LaunchResult() : cudaErrorInvalidValue;
}

cudaError_t LaunchToHalf(const float* x, int64_t count, void* dst, cudaStream_t s) {
  ToHalfKernel<<<GridFor(count, 256), 256, 0, s>>>(x, count, static_cast<__half*>(dst));
  return LaunchResult();
}

cudaError_t LaunchRandomFill(GgmlType type, void* dst, int64_t ne0, int64_t row0, int64_t ne1, uint64_t seed,
                             float sigma, float mean, cudaStream_t s) {
  const bool ok = Dispatch(type, [&]<GgmlType T>() {
    const int64_t per_row = ne0 / Geo<T>::kQk;
    RandomFillKernel<T><<<GridFor(per_row * ne1, 128), 128, 0, s>>>(static_cast<uint8_t*>(dst), row0 * per_row,
                                                                    per_row * ne1, seed, sigma, mean);
  });
  return ok ? LaunchResult() : cudaErrorInvalidValue;
}

}  // namespace specd::cuda
