// Decode / verify matrix-vector kernels: y = W x for 1..16 input columns, the
// weight matrix read once for all of them.
//
// Quantized weights (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K) go through the
// integer tensor cores: the quants of each 32-element unit are used as they
// are (small integers, exact in int8), the activations are quantized per
// column and unit to two int8 levels (x ~ s * (254*hi + lo), ~16 bits), and the
// int32 dot of each unit is scaled by the unit's float coefficients:
//   unit dot = coef_row * s_col * D + mcoef_row * sum(x of the unit)
// where mcoef carries the formats' offsets and mins. Per output element the
// order of every operation depends only on the matrix shape, never on how
// many columns the launch has: a k+1-token verify reproduces single-token
// decode bit for bit.
//
// Memory path: each warp owns 32 rows x one 256-element stage of the row,
// copied into shared memory with 16-byte cp.async (aligned windows, so blocks
// of any size and alignment are fine), 3 stages in flight per warp. Warps of
// one block split K (a fixed, shape-dependent split) and are reduced in a
// fixed order. Float weights (F16 BF16 F32) use a plain FP32 FMA kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "common/backend/cuda/k_common.cuh"

namespace specd::cuda {

// Outside the anonymous namespace: nvcc warns about unused members of local traits.
namespace mmq {
template <GgmlType T> struct Mq;
// kStage: bytes of 256 elements of a row. kUnit: bytes of one 32-element block
// (legacy formats; 0 for k-quants, whose rows are whole super-blocks).
#define SPECD_MQ(T, STAGE, UNIT)                                       \
  template <> struct Mq<GgmlType::T> {                                 \
    static constexpr int kStage = STAGE;                               \
    static constexpr int kUnit = UNIT;                                 \
    static constexpr int kWin = (STAGE + 15) / 16 + 1;                 \
    static constexpr int kStride = kWin * 16 + ((kWin % 2) ? 0 : 16);  \
  };
SPECD_MQ(Q4_0, 144, 18)
SPECD_MQ(Q4_1, 160, 20)
SPECD_MQ(Q5_0, 176, 22)
SPECD_MQ(Q5_1, 192, 24)
SPECD_MQ(Q8_0, 272, 34)
SPECD_MQ(Q4_K, 144, 0)
SPECD_MQ(Q5_K, 176, 0)
SPECD_MQ(Q6_K, 210, 0)
#undef SPECD_MQ
}  // namespace mmq
using mmq::Mq;

namespace {

constexpr int kStages = 3;        // cp.async stages in flight per warp
constexpr int kUnitsPerStage = 8; // 8 x 32 = 256 elements

template <GgmlType T>
constexpr int WarpSmem() {
  return kStages * 32 * Mq<T>::kStride;
}

// ---- activation quantization ----
// One warp per (column, unit). Columns >= n of the last group get zeros.
__global__ void QuantizeXKernel(const float* x, int n, int64_t k, uint8_t* xq) {
  const int64_t nu = k / 32;
  const int64_t wid = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  const int ncg = (n + 15) / 16;
  if (wid >= nu * ncg * 16) return;
  const int64_t u = wid % nu;
  const int col = static_cast<int>(wid / nu);
  const float v = col < n ? x[static_cast<int64_t>(col) * k + u * 32 + lane] : 0.0f;
  QuantizeUnitWarp(v, col, u, nu, xq);
}

// ---- epilogues ----
// D = A (16 rows x 32 quants) * (254*hi + lo) of the fragment's columns, then
// acc += D * coef * s (+ mcoef * sum32).
template <bool kMin>
__device__ __forceinline__ void EpiK32(float (&acc)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                       const uint4& bx, const float4& sc, float c_lo, float c_hi, float m_lo,
                                       float m_hi) {
  int d[4] = {0, 0, 0, 0};
  MmaK32(d, a0, a1, a2, a3, bx.x, bx.y);
#pragma unroll
  for (int i = 0; i < 4; ++i) d[i] *= 254;
  MmaK32(d, a0, a1, a2, a3, bx.z, bx.w);
  acc[0] = __fmaf_rn(__int2float_rn(d[0]), __fmul_rn(c_lo, sc.x), acc[0]);
  acc[1] = __fmaf_rn(__int2float_rn(d[1]), __fmul_rn(c_lo, sc.z), acc[1]);
  acc[2] = __fmaf_rn(__int2float_rn(d[2]), __fmul_rn(c_hi, sc.x), acc[2]);
  acc[3] = __fmaf_rn(__int2float_rn(d[3]), __fmul_rn(c_hi, sc.z), acc[3]);
  if constexpr (kMin) {
    acc[0] = __fmaf_rn(m_lo, sc.y, acc[0]);
    acc[1] = __fmaf_rn(m_lo, sc.w, acc[1]);
    acc[2] = __fmaf_rn(m_hi, sc.y, acc[2]);
    acc[3] = __fmaf_rn(m_hi, sc.w, acc[3]);
  }
}

// 16-element half h of a unit (Q6_K: one scale per 16). sc: {s0, s1} of the
// columns, sum: {sum16 col0, sum16 col1} of this half.
__device__ __forceinline__ void EpiK16(float (&acc)[4], uint32_t a0, uint32_t a1, uint32_t bh, uint32_t bl, float s0,
                                       float s1, float sum0, float sum1, float c_lo, float c_hi, float m_lo,
                                       float m_hi) {
  int d[4] = {0, 0, 0, 0};
  MmaK16(d, a0, a1, bh);
#pragma unroll
  for (int i = 0; i < 4; ++i) d[i] *= 254;
  MmaK16(d, a0, a1, bl);
  acc[0] = __fmaf_rn(__int2float_rn(d[0]), __fmul_rn(c_lo, s0), acc[0]);
  acc[1] = __fmaf_rn(__int2float_rn(d[1]), __fmul_rn(c_lo, s1), acc[1]);
  acc[2] = __fmaf_rn(__int2float_rn(d[2]), __fmul_rn(c_hi, s0), acc[2]);
  acc[3] = __fmaf_rn(__int2float_rn(d[3]), __fmul_rn(c_hi, s1), acc[3]);
  acc[0] = __fmaf_rn(m_lo, sum0, acc[0]);
  acc[1] = __fmaf_rn(m_lo, sum1, acc[1]);
  acc[2] = __fmaf_rn(m_hi, sum0, acc[2]);
  acc[3] = __fmaf_rn(m_hi, sum1, acc[3]);
}

__device__ __forceinline__ uint32_t Spread4(uint32_t b) { return ((b & 0xFu) * 0x00204081u) & 0x01010101u; }

// Q4_K / Q5_K scale and min of sub-block j from the 12 scale bytes (3 words).
__device__ __forceinline__ void ScaleMinK4(int j, uint32_t s0, uint32_t s1, uint32_t s2, int* sc, int* m) {
  if (j < 4) {
    *sc = (s0 >> (8 * j)) & 63;
    *m = (s1 >> (8 * j)) & 63;
  } else {
    const int jj = j - 4;
    const uint32_t b2 = (s2 >> (8 * jj)) & 0xFF;
    *sc = static_cast<int>((b2 & 0xF) | (((s0 >> (8 * jj + 6)) & 3) << 4));
    *m = static_cast<int>((b2 >> 4) | (((s1 >> (8 * jj + 6)) & 3) << 4));
  }
}

struct XqView {
  const uint8_t* base;  // this column group's block
  // fragment (16 B) of column c for lane t, unit u
  __device__ __forceinline__ uint4 Frag(int64_t u, int c, int t) const {
    return *reinterpret_cast<const uint4*>(base + u * kXqUnit + (c * 4 + t) * 16);
  }
  __device__ __forceinline__ float4 Sc(int64_t u, int c2) const {  // columns c2, c2+1 (c2 even)
    return *reinterpret_cast<const float4*>(base + u * kXqUnit + kXqFrag + c2 * 8);
  }
  __device__ __forceinline__ float4 S16(int64_t u, int c2) const {
    return *reinterpret_cast<const float4*>(base + u * kXqUnit + kXqFrag + kXqSc + c2 * 8);
  }
  __device__ __forceinline__ uint32_t Word(int64_t u, int c, int byte) const {  // byte: 0..31 of xh, +32: xl
    const int lo = byte >= 32;
    const int b = byte & 31;
    return *reinterpret_cast<const uint32_t*>(base + u * kXqUnit + (c * 4 + b / 8) * 16 + lo * 8 + (b & 7));
  }
};

// ---- per-type stage compute ----
// rp[mt][0/1]: shared-memory address of row 16mt+g / 16mt+g+8 of this stage
// (window offset applied). u0: global index of the stage's first unit.
template <GgmlType T, int NT>
__device__ __forceinline__ void StageLegacy(const uint8_t* (&rp)[2][2], int units, int64_t u0, const XqView& xq, int g,
                                            int t, float (&acc)[2][NT][4]) {
  constexpr int kU = Mq<T>::kUnit;
  for (int u = 0; u < units; ++u) {
    uint4 bx[NT];
    float4 sc[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      bx[nt] = xq.Frag(u0 + u, nt * 8 + g, t);
      sc[nt] = xq.Sc(u0 + u, nt * 8 + 2 * t);
    }
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      uint32_t w[2][2];
      float coef[2], mc[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint8_t* b = rp[mt][h] + u * kU;
        const float d = H2F(Lds16u(b));
        coef[h] = d;
        if constexpr (T == GgmlType::Q8_0) {
          w[h][0] = Lds32u(b + 2 + 8 * t);
          w[h][1] = Lds32u(b + 6 + 8 * t);
          mc[h] = 0.0f;
        } else if constexpr (T == GgmlType::Q4_0 || T == GgmlType::Q4_1) {
          constexpr int qs = T == GgmlType::Q4_0 ? 2 : 4;
          const int sh = 4 * (t >> 1);
          w[h][0] = (Lds32u(b + qs + 8 * (t & 1)) >> sh) & 0x0F0F0F0Fu;
          w[h][1] = (Lds32u(b + qs + 4 + 8 * (t & 1)) >> sh) & 0x0F0F0F0Fu;
          mc[h] = T == GgmlType::Q4_0 ? __fmul_rn(-8.0f, d) : H2F(Lds16u(b + 2));
        } else {  // Q5_0 / Q5_1
          constexpr int qho = T == GgmlType::Q5_0 ? 2 : 4;
          constexpr int qs = qho + 4;
          const int sh = 4 * (t >> 1);
          const uint32_t qh = (Lds32u(b + qho) >> (8 * t)) & 0xFFu;
          w[h][0] = ((Lds32u(b + qs + 8 * (t & 1)) >> sh) & 0x0F0F0F0Fu) | (Spread4(qh) << 4);
          w[h][1] = ((Lds32u(b + qs + 4 + 8 * (t & 1)) >> sh) & 0x0F0F0F0Fu) | (Spread4(qh >> 4) << 4);
          mc[h] = T == GgmlType::Q5_0 ? __fmul_rn(-16.0f, d) : H2F(Lds16u(b + 2));
        }
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        EpiK32<T != GgmlType::Q8_0>(acc[mt][nt], w[0][0], w[1][0], w[0][1], w[1][1], bx[nt], sc[nt], coef[0],
                                    coef[1], mc[0], mc[1]);
    }
  }
}

template <GgmlType T, int NT>
__device__ __forceinline__ void StageK4(const uint8_t* (&rp)[2][2], int64_t u0, const XqView& xq, int g, int t,
                                        float (&acc)[2][NT][4]) {
  // Header of each of the 4 rows: d, dmin, 12 scale bytes (aligned: rows are whole 16-byte windows).
  uint32_t hd[2][2][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint4 v = *reinterpret_cast<const uint4*>(rp[mt][h]);
      hd[mt][h][0] = v.x;
      hd[mt][h][1] = v.y;
      hd[mt][h][2] = v.z;
      hd[mt][h][3] = v.w;
    }
  constexpr int kQs = T == GgmlType::Q4_K ? 16 : 48;
#pragma unroll 1
  for (int j = 0; j < 4; ++j) {  // sub-block pair 2j, 2j+1 shares the quant bytes
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int sb = 2 * j + half;
      uint4 bx[NT];
      float4 sc[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        bx[nt] = xq.Frag(u0 + sb, nt * 8 + g, t);
        sc[nt] = xq.Sc(u0 + sb, nt * 8 + 2 * t);
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        uint32_t w[2][2];
        float coef[2], mc[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint8_t* b = rp[mt][h];
          const uint2 q = *reinterpret_cast<const uint2*>(b + kQs + 32 * j + 8 * t);
          w[h][0] = (q.x >> (4 * half)) & 0x0F0F0F0Fu;
          w[h][1] = (q.y >> (4 * half)) & 0x0F0F0F0Fu;
          if constexpr (T == GgmlType::Q5_K) {
            const uint2 qh = *reinterpret_cast<const uint2*>(b + 16 + 8 * t);
            w[h][0] |= ((qh.x >> sb) & 0x01010101u) << 4;
            w[h][1] |= ((qh.y >> sb) & 0x01010101u) << 4;
          }
          int s, m;
          ScaleMinK4(sb, hd[mt][h][1], hd[mt][h][2], hd[mt][h][3], &s, &m);
          const uint32_t dd = hd[mt][h][0];
          coef[h] = __fmul_rn(H2F(static_cast<uint16_t>(dd & 0xFFFF)), static_cast<float>(s));
          mc[h] = -__fmul_rn(H2F(static_cast<uint16_t>(dd >> 16)), static_cast<float>(m));
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
          EpiK32<true>(acc[mt][nt], w[0][0], w[1][0], w[0][1], w[1][1], bx[nt], sc[nt], coef[0], coef[1], mc[0],
                       mc[1]);
      }
    }
  }
}

template <int NT>
__device__ __forceinline__ void StageQ6K(const uint8_t* (&rp)[2][2], int64_t u0, const XqView& xq, int g, int t,
                                         float (&acc)[2][NT][4]) {
  float dd[2][2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) dd[mt][h] = H2F(Lds16u(rp[mt][h] + 208));
#pragma unroll 1
  for (int hh = 0; hh < 2; ++hh) {      // 128-element half of the super-block
#pragma unroll 1
    for (int hf = 0; hf < 2; ++hf) {    // 16-element half of each unit
      // Quant words of the 4 rows: ql[l], ql[32 + l], qh[l] with l = 16*hf + 4t.
      uint32_t qa[2][2], qb[2][2], qc[2][2];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint8_t* b = rp[mt][h];
          qa[mt][h] = Lds32u(b + 64 * hh + 16 * hf + 4 * t);
          qb[mt][h] = Lds32u(b + 64 * hh + 32 + 16 * hf + 4 * t);
          qc[mt][h] = Lds32u(b + 128 + 32 * hh + 16 * hf + 4 * t);
        }
#pragma unroll
      for (int q = 0; q < 4; ++q) {  // quarter: unit 4*hh + q
        const int64_t u = u0 + 4 * hh + q;
        uint32_t bh[NT], bl[NT];
        float4 sc[NT], sm[NT];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          bh[nt] = xq.Word(u, nt * 8 + g, 16 * hf + 4 * t);
          bl[nt] = xq.Word(u, nt * 8 + g, 32 + 16 * hf + 4 * t);
          sc[nt] = xq.Sc(u, nt * 8 + 2 * t);
          sm[nt] = xq.S16(u, nt * 8 + 2 * t);
        }
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          uint32_t w[2];
          float coef[2], mc[2];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const uint32_t ql = (q & 1) ? qb[mt][h] : qa[mt][h];
            const uint32_t lo4 = (ql >> (4 * (q >> 1))) & 0x0F0F0F0Fu;
            const uint32_t hi2 = ((qc[mt][h] >> (2 * q)) & 0x03030303u) << 4;
            w[h] = lo4 | hi2;
            const int8_t s = static_cast<int8_t>(rp[mt][h][192 + 8 * hh + 2 * q + hf]);
            coef[h] = __fmul_rn(dd[mt][h], static_cast<float>(s));
            mc[h] = __fmul_rn(-32.0f, coef[h]);
          }
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const float sum0 = hf ? sm[nt].y : sm[nt].x, sum1 = hf ? sm[nt].w : sm[nt].z;
            EpiK16(acc[mt][nt], w[0], w[1], bh[nt], bl[nt], sc[nt].x, sc[nt].z, sum0, sum1, coef[0], coef[1], mc[0],
                   mc[1]);
          }
        }
      }
    }
  }
}

struct MmqArgs {
  const uint8_t* w;
  size_t row_bytes;
  int64_t rows, k;
  const uint8_t* xq;
  int n;
  const float* bias;
  float* y;
  int64_t ldy;
};

template <GgmlType T, int NT>
__global__ void __launch_bounds__(256) MmqKernel(MmqArgs a) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int kStride = Mq<T>::kStride, kWin = Mq<T>::kWin, kStage = Mq<T>::kStage;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int split = blockDim.x >> 5;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * 32;
  uint8_t* wbuf = smem + warp * WarpSmem<T>();
  const int64_t n_units = a.k / 32;
  const int n_stages = static_cast<int>((n_units + kUnitsPerStage - 1) / kUnitsPerStage);
  const int n_my = warp < n_stages ? (n_stages - warp + split - 1) / split : 0;
  const XqView xq{a.xq};

  auto issue = [&](int i) {
    const int s = warp + i * split;
    uint8_t* buf = wbuf + (i % kStages) * 32 * kStride;
    const int64_t sb = static_cast<int64_t>(s) * kStage;
    const int64_t nbytes = min(static_cast<int64_t>(kStage), static_cast<int64_t>(a.row_bytes) - sb);
    for (int c = lane; c < 32 * kWin; c += 32) {
      const int r = c / kWin, ch = c - r * kWin;
      const int64_t row = row0 + r;
      if (row >= a.rows) continue;
      const uintptr_t g0 = reinterpret_cast<uintptr_t>(a.w + row * a.row_bytes + sb);
      const uintptr_t al = g0 & ~uintptr_t{15};
      const int nch = static_cast<int>((((g0 + nbytes + 15) & ~uintptr_t{15}) - al) / 16);
      if (ch < nch) CpAsync16(buf + r * kStride + ch * 16, reinterpret_cast<const void*>(al + ch * 16));
    }
  };

  float acc[2][NT][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;

#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < n_my) issue(i);
    CpAsyncCommit();
  }
  for (int i = 0; i < n_my; ++i) {
    if (i + kStages - 1 < n_my) issue(i + kStages - 1);
    CpAsyncCommit();
    CpAsyncWait<kStages - 1>();
    __syncwarp();
    const int s = warp + i * split;
    const uint8_t* buf = wbuf + (i % kStages) * 32 * kStride;
    const int64_t sb = static_cast<int64_t>(s) * kStage;
    const uint8_t* rp[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 16 * mt + 8 * h + g;
        const int64_t row = min(row0 + r, a.rows - 1);
        const uintptr_t g0 = reinterpret_cast<uintptr_t>(a.w + row * a.row_bytes + sb);
        rp[mt][h] = buf + r * kStride + (g0 & 15);
      }
    const int64_t u0 = static_cast<int64_t>(s) * kUnitsPerStage;
    if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
      StageK4<T, NT>(rp, u0, xq, g, t, acc);
    } else if constexpr (T == GgmlType::Q6_K) {
      StageQ6K<NT>(rp, u0, xq, g, t, acc);
    } else {
      const int units = static_cast<int>(min(static_cast<int64_t>(kUnitsPerStage), n_units - u0));
      StageLegacy<T, NT>(rp, units, u0, xq, g, t, acc);
    }
    __syncwarp();
  }
  CpAsyncWait<0>();

  // Reduce the K-split in a fixed order (warp 0, then 1, ...).
  if (split > 1) {
    __syncthreads();
    float* red = reinterpret_cast<float*>(smem);
    constexpr int kPer = 2 * NT * 4;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) red[(warp * 32 + lane) * kPer + (mt * NT + nt) * 4 + i] = acc[mt][nt][i];
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          float v = red[lane * kPer + (mt * NT + nt) * 4 + i];
          for (int w = 1; w < split; ++w) v = __fadd_rn(v, red[(w * 32 + lane) * kPer + (mt * NT + nt) * 4 + i]);
          acc[mt][nt][i] = v;
        }
  }
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t row = row0 + 16 * mt + g + 8 * (i >> 1);
        const int col = nt * 8 + 2 * t + (i & 1);
        if (row < a.rows && col < a.n) {
          float v = acc[mt][nt][i];
          if (a.bias) v = __fadd_rn(v, a.bias[row]);
          a.y[col * a.ldy + row] = v;
        }
      }
}

template <class F>
bool DispatchMmq(GgmlType t, F&& f) {
  switch (t) {
#define SPECD_CASE(T) \
  case GgmlType::T: f.template operator()<GgmlType::T>(); return true;
    SPECD_CASE(Q4_0) SPECD_CASE(Q4_1) SPECD_CASE(Q5_0) SPECD_CASE(Q5_1) SPECD_CASE(Q8_0)
    SPECD_CASE(Q4_K) SPECD_CASE(Q5_K) SPECD_CASE(Q6_K)
#undef SPECD_CASE
    default: return false;
  }
}

int WarpSmemFor(GgmlType type) {
  int b = 0;
  DispatchMmq(type, [&]<GgmlType T>() { b = WarpSmem<T>(); });
  return b;
}

// ---- float weights: FP32 FMA ----
template <GgmlType T>
__device__ __forceinline__ void Load8(const uint8_t* row, int64_t k, float (&w)[8]) {
  if constexpr (T == GgmlType::F32) {
    const float4 a = *reinterpret_cast<const float4*>(row + k * 4);
    const float4 b = *reinterpret_cast<const float4*>(row + k * 4 + 16);
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
  } else {
    const uint4 v = *reinterpret_cast<const uint4*>(row + k * 2);
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (T == GgmlType::F16) {
        w[2 * i] = H2F(static_cast<uint16_t>(u[i] & 0xFFFF));
        w[2 * i + 1] = H2F(static_cast<uint16_t>(u[i] >> 16));
      } else {
        w[2 * i] = __uint_as_float(u[i] << 16);
        w[2 * i + 1] = __uint_as_float(u[i] & 0xFFFF0000u);
      }
    }
  }
}
template <GgmlType T>
__device__ __forceinline__ float Load1(const uint8_t* row, int64_t k) {
  if constexpr (T == GgmlType::F32) return reinterpret_cast<const float*>(row)[k];
  else if constexpr (T == GgmlType::F16) return H2F(reinterpret_cast<const uint16_t*>(row)[k]);
  else return __uint_as_float(static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(row)[k]) << 16);
}

constexpr int kFmvRows = 4;
template <GgmlType T, int NC>
__global__ void __launch_bounds__(128) FmvKernel(const uint8_t* w, size_t row_bytes, int64_t rows, int64_t k,
                                                 const float* x, int64_t ldx, int n, const float* bias, float* y,
                                                 int64_t ldy, bool vec) {
  const int lane = threadIdx.x & 31;
  const int64_t r0 = (static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32) * kFmvRows;
  if (r0 >= rows) return;
  const uint8_t* rp[kFmvRows];
#pragma unroll
  for (int r = 0; r < kFmvRows; ++r) rp[r] = w + min(r0 + r, rows - 1) * row_bytes;
  float acc[kFmvRows][NC];
#pragma unroll
  for (int r = 0; r < kFmvRows; ++r)
#pragma unroll
    for (int c = 0; c < NC; ++c) acc[r][c] = 0.0f;
  const int64_t k8 = vec ? (k / 8) * 8 : 0;
  for (int64_t kk = lane * 8; kk < k8; kk += 256) {
    float wv[kFmvRows][8];
#pragma unroll
    for (int r = 0; r < kFmvRows; ++r) Load8<T>(rp[r], kk, wv[r]);
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      if (c < n) {
        const float4 xa = *reinterpret_cast<const float4*>(x + c * ldx + kk);
        const float4 xb = *reinterpret_cast<const float4*>(x + c * ldx + kk + 4);
        const float xv[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
        for (int r = 0; r < kFmvRows; ++r)
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[r][c] = __fmaf_rn(wv[r][e], xv[e], acc[r][c]);
      }
    }
  }
  for (int64_t kk = k8 + lane; kk < k; kk += 32) {
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      if (c < n) {
        const float xv = x[c * ldx + kk];
#pragma unroll
        for (int r = 0; r < kFmvRows; ++r) acc[r][c] = __fmaf_rn(Load1<T>(rp[r], kk), xv, acc[r][c]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kFmvRows; ++r)
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      if (c < n) {
        float v = WarpSum(acc[r][c]);
        if (lane == 0 && r0 + r < rows) {
          if (bias) v = __fadd_rn(v, bias[r0 + r]);
          y[c * ldy + r0 + r] = v;
        }
      }
    }
}

template <GgmlType T, int NC>
void LaunchFmvT(const void* w, int64_t rows, int64_t k, const float* x, int64_t ldx, int n, const float* bias,
                float* y, int64_t ldy, cudaStream_t s) {
  const size_t row_bytes = static_cast<size_t>(k) * (T == GgmlType::F32 ? 4 : 2);
  const bool vec = k % 8 == 0 && ldx % 4 == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0 &&
                   (reinterpret_cast<uintptr_t>(w) & 15) == 0;
  const int wpb = 4;
  const int grid = CeilDiv(rows, wpb * kFmvRows);
  FmvKernel<T, NC><<<grid, wpb * 32, 0, s>>>(static_cast<const uint8_t*>(w), row_bytes, rows, k, x, ldx, n, bias, y,
                                             ldy, vec);
}

}  // namespace

size_t XQuantBytes(int n, int64_t k) {
  const int64_t ncg = (n + 15) / 16;
  return static_cast<size_t>(ncg * (k / 32) * kXqUnit);
}

cudaError_t LaunchQuantizeX(const float* x, int n, int64_t k, void* xq, cudaStream_t s) {
  const int64_t ncg = (n + 15) / 16;
  const int64_t warps = ncg * 16 * (k / 32);
  const int threads = 256;
  QuantizeXKernel<<<CeilDiv(warps * 32, threads), threads, 0, s>>>(x, n, k, static_cast<uint8_t*>(xq));
  return LaunchResult();
}

bool MmqSupported(GgmlType type, int64_t rows, int64_t k, size_t row_bytes) {
  const int ws = WarpSmemFor(type);
  if (ws == 0 || rows < 1 || k < 32 || k % 32 != 0) return false;
  const bool kquant = type == GgmlType::Q4_K || type == GgmlType::Q5_K || type == GgmlType::Q6_K;
  if (kquant && k % 256 != 0) return false;
  if (row_bytes != RowBytes(type, k)) return false;
  // Q4_K/Q5_K read their headers and quants with aligned vector loads.
  if ((type == GgmlType::Q4_K || type == GgmlType::Q5_K) && row_bytes % 16 != 0) return false;
  return ws + 64 <= GetDeviceInfo().smem_optin;
}

int MmqSplit(GgmlType type, int64_t rows, int64_t k) {
  const DeviceInfo& d = GetDeviceInfo();
  const int64_t tiles = (rows + 31) / 32;
  const int64_t stages = (k / 32 + kUnitsPerStage - 1) / kUnitsPerStage;
  const int ws = WarpSmemFor(type);
  const int64_t target = 12LL * (d.sm_count > 0 ? d.sm_count : 100);
  int split = 1;
  while (split < 8 && tiles * split * 2 <= target && split * 2 <= stages &&
         static_cast<int64_t>(split) * 2 * ws + 64 <= d.smem_optin)
    split *= 2;
  return split;
}

cudaError_t LaunchMmq(GgmlType type, const void* w, size_t row_bytes, int64_t rows, int64_t k, const void* xq, int n,
                      const float* bias, float* y, int64_t ldy, int split, cudaStream_t s) {
  if (n < 1 || n > 16) return cudaErrorInvalidValue;
  MmqArgs a{static_cast<const uint8_t*>(w), row_bytes, rows, k, static_cast<const uint8_t*>(xq), n, bias, y, ldy};
  const bool ok = DispatchMmq(type, [&]<GgmlType T>() {
    const int smem = split * WarpSmem<T>() + 64;
    const int grid = CeilDiv(rows, 32);
    if (n <= 8) MmqKernel<T, 1><<<grid, split * 32, smem, s>>>(a);
    else MmqKernel<T, 2><<<grid, split * 32, smem, s>>>(a);
  });
  if (!ok) return cudaErrorInvalidValue;
  return LaunchResult();
}

cudaError_t PrepareMatvecKernels() {
  cudaError_t err = cudaSuccess;
  const int limit = GetDeviceInfo().smem_optin;
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q4_K,
                     GgmlType::Q5_K, GgmlType::Q6_K}) {
    DispatchMmq(t, [&]<GgmlType T>() {
      for (cudaError_t e : {cudaFuncSetAttribute(MmqKernel<T, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, limit),
                            cudaFuncSetAttribute(MmqKernel<T, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, limit)})
        if (e != cudaSuccess && err == cudaSuccess) err = e;
    });
  }
  return err;
}

bool FmvSupported(GgmlType type) {
  return type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16;
}

cudaError_t LaunchFmv(GgmlType type, const void* w, int64_t rows, int64_t k, const float* x, int64_t ldx, int n,
                      const float* bias, float* y, int64_t ldy, cudaStream_t s) {
  if (n < 1 || n > 16) return cudaErrorInvalidValue;
  auto go = [&]<GgmlType T>() {
    if (n <= 1) LaunchFmvT<T, 1>(w, rows, k, x, ldx, n, bias, y, ldy, s);
    else if (n <= 2) LaunchFmvT<T, 2>(w, rows, k, x, ldx, n, bias, y, ldy, s);
    else if (n <= 4) LaunchFmvT<T, 4>(w, rows, k, x, ldx, n, bias, y, ldy, s);
    else if (n <= 8) LaunchFmvT<T, 8>(w, rows, k, x, ldx, n, bias, y, ldy, s);
    else LaunchFmvT<T, 16>(w, rows, k, x, ldx, n, bias, y, ldy, s);
  };
  switch (type) {
    case GgmlType::F32: go.template operator()<GgmlType::F32>(); break;
    case GgmlType::F16: go.template operator()<GgmlType::F16>(); break;
    case GgmlType::BF16: go.template operator()<GgmlType::BF16>(); break;
    default: return cudaErrorInvalidValue;
  }
  return LaunchResult();
}

}  // namespace specd::cuda
