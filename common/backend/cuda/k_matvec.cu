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

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

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

// v2 format traits (see mv2 below): bytes per 256 elements, A encoding, min term, 16-element scales.
namespace mv2t {
template <GgmlType T> struct Fmt;
template <> struct Fmt<GgmlType::Q4_K> {
  static constexpr int kGroup = 144;
  static constexpr bool kU8 = true, kMin = true, kHalves = false;
};
template <> struct Fmt<GgmlType::Q5_K> {
  static constexpr int kGroup = 176;
  static constexpr bool kU8 = true, kMin = true, kHalves = false;
};
template <> struct Fmt<GgmlType::Q6_K> {
  static constexpr int kGroup = 210;
  static constexpr bool kU8 = false, kMin = false, kHalves = true;
};
template <> struct Fmt<GgmlType::Q8_0> {
  static constexpr int kGroup = 272;
  static constexpr bool kU8 = false, kMin = false, kHalves = false;
};

}  // namespace mv2t

namespace {

constexpr int kUnitsPerStage = 8;  // 8 x 32 = 256 elements

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

// Activation fragments of one stage in shared memory: per unit kXU bytes =
// fragments of columns 0..8NT-1 (512 B per 8 columns), {scale, sum32} of
// those columns, and (Q6_K) {sum16 lo, sum16 hi}.
template <GgmlType T, int NT>
struct XqGeo {
  static constexpr int kFrag = NT * 512, kSc = NT * 64, kS16 = T == GgmlType::Q6_K ? NT * 64 : 0;
  static constexpr int kXU = kFrag + kSc + kS16;
};

template <GgmlType T, int NT>
struct XqSmem {
  const uint8_t* base;  // unit 0 of the stage
  __device__ __forceinline__ uint4 Frag(int u, int c, int t) const {
    return *reinterpret_cast<const uint4*>(base + u * XqGeo<T, NT>::kXU + (c * 4 + t) * 16);
  }
  __device__ __forceinline__ float4 Sc(int u, int c2) const {  // columns c2, c2+1 (c2 even)
    return *reinterpret_cast<const float4*>(base + u * XqGeo<T, NT>::kXU + XqGeo<T, NT>::kFrag + c2 * 8);
  }
  __device__ __forceinline__ float4 S16(int u, int c2) const {
    return *reinterpret_cast<const float4*>(base + u * XqGeo<T, NT>::kXU + XqGeo<T, NT>::kFrag + XqGeo<T, NT>::kSc +
                                            c2 * 8);
  }
  __device__ __forceinline__ uint32_t Word(int u, int c, int byte) const {  // byte 0..31: hi, +32: lo
    const int lo = byte >= 32, b = byte & 31;
    return *reinterpret_cast<const uint32_t*>(base + u * XqGeo<T, NT>::kXU + (c * 4 + b / 8) * 16 + lo * 8 + (b & 7));
  }
};

// ---- per-row scale tables (one lane per row, once per stage) ----
// K-quants and legacy: float2 {coef, mcoef} per unit; Q6_K: coef per 16 elements.
constexpr int kTableBytes = 32 * 16 * 4;

template <GgmlType T>
__device__ __forceinline__ void BuildTable(const uint8_t* row, int units, float* tab) {
  if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
    const uint4 h = *reinterpret_cast<const uint4*>(row);
    const float d = H2F(static_cast<uint16_t>(h.x & 0xFFFF)), dm = H2F(static_cast<uint16_t>(h.x >> 16));
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      int sc, m;
      ScaleMinK4(u, h.y, h.z, h.w, &sc, &m);
      reinterpret_cast<float2*>(tab)[u] = make_float2(__fmul_rn(d, static_cast<float>(sc)),
                                                      -__fmul_rn(dm, static_cast<float>(m)));
    }
  } else if constexpr (T == GgmlType::Q6_K) {
    const float d = H2F(Lds16u(row + 208));
#pragma unroll
    for (int i = 0; i < 16; i += 2) {
      const uint32_t w = Lds16u(row + 192 + i);
      tab[i] = __fmul_rn(d, static_cast<float>(static_cast<int8_t>(w & 0xFF)));
      tab[i + 1] = __fmul_rn(d, static_cast<float>(static_cast<int8_t>(w >> 8)));
    }
  } else {
    constexpr int kU = Mq<T>::kUnit;
    for (int u = 0; u < units; ++u) {
      const uint8_t* b = row + u * kU;
      const float d = H2F(Lds16u(b));
      float mc = 0.0f;
      if constexpr (T == GgmlType::Q4_0) mc = __fmul_rn(-8.0f, d);
      else if constexpr (T == GgmlType::Q5_0) mc = __fmul_rn(-16.0f, d);
      else if constexpr (T == GgmlType::Q4_1 || T == GgmlType::Q5_1) mc = H2F(Lds16u(b + 2));
      reinterpret_cast<float2*>(tab)[u] = make_float2(d, mc);
    }
  }
}

// ---- per-type stage compute ----
// rp[mt][h]: shared-memory address of the stage of row 16mt+8h+g (window
// offset applied); tab: this warp's table ([32 rows][16 floats]).
template <GgmlType T, int NT>
__device__ __forceinline__ void StageLegacy(const uint8_t* (&rp)[2][2], int units, const XqSmem<T, NT>& xq,
                                            const float* tab, int g, int t, float (&acc)[2][NT][4]) {
  constexpr int kU = Mq<T>::kUnit;
  for (int u = 0; u < units; ++u) {
    uint4 bx[NT];
    float4 sc[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      bx[nt] = xq.Frag(u, nt * 8 + g, t);
      sc[nt] = xq.Sc(u, nt * 8 + 2 * t);
    }
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      uint32_t w[2][2];
      float2 cf[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint8_t* b = rp[mt][h] + u * kU;
        cf[h] = reinterpret_cast<const float2*>(tab + (16 * mt + 8 * h + g) * 16)[u];
        if constexpr (T == GgmlType::Q8_0) {
          w[h][0] = Lds32u(b + 2 + 8 * t);
          w[h][1] = Lds32u(b + 6 + 8 * t);
        } else if constexpr (T == GgmlType::Q4_0 || T == GgmlType::Q4_1) {
          constexpr int qs = T == GgmlType::Q4_0 ? 2 : 4;
          const int sh = 4 * (t >> 1);
          w[h][0] = (Lds32u(b + qs + 8 * (t & 1)) >> sh) & 0x0F0F0F0Fu;
          w[h][1] = (Lds32u(b + qs + 4 + 8 * (t & 1)) >> sh) & 0x0F0F0F0Fu;
        } else {  // Q5_0 / Q5_1
          constexpr int qho = T == GgmlType::Q5_0 ? 2 : 4;
          constexpr int qs = qho + 4;
          const int sh = 4 * (t >> 1);
          const uint32_t qh = (Lds32u(b + qho) >> (8 * t)) & 0xFFu;
          w[h][0] = ((Lds32u(b + qs + 8 * (t & 1)) >> sh) & 0x0F0F0F0Fu) | (Spread4(qh) << 4);
          w[h][1] = ((Lds32u(b + qs + 4 + 8 * (t & 1)) >> sh) & 0x0F0F0F0Fu) | (Spread4(qh >> 4) << 4);
        }
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        EpiK32<T != GgmlType::Q8_0>(acc[mt][nt], w[0][0], w[1][0], w[0][1], w[1][1], bx[nt], sc[nt], cf[0].x,
                                    cf[1].x, cf[0].y, cf[1].y);
    }
  }
}

template <GgmlType T, int NT>
__device__ __forceinline__ void StageK4(const uint8_t* (&rp)[2][2], const XqSmem<T, NT>& xq, const float* tab, int g,
                                        int t, float (&acc)[2][NT][4]) {
  constexpr int kQs = T == GgmlType::Q4_K ? 16 : 48;
#pragma unroll 2
  for (int j = 0; j < 4; ++j) {  // sub-block pair 2j, 2j+1 shares the quant bytes
    uint2 q[2][2], qh[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        q[mt][h] = *reinterpret_cast<const uint2*>(rp[mt][h] + kQs + 32 * j + 8 * t);
        if constexpr (T == GgmlType::Q5_K) qh[mt][h] = *reinterpret_cast<const uint2*>(rp[mt][h] + 16 + 8 * t);
      }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int sb = 2 * j + half;
      uint4 bx[NT];
      float4 sc[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        bx[nt] = xq.Frag(sb, nt * 8 + g, t);
        sc[nt] = xq.Sc(sb, nt * 8 + 2 * t);
      }
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        uint32_t w[2][2];
        float2 cf[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          w[h][0] = (q[mt][h].x >> (4 * half)) & 0x0F0F0F0Fu;
          w[h][1] = (q[mt][h].y >> (4 * half)) & 0x0F0F0F0Fu;
          if constexpr (T == GgmlType::Q5_K) {
            w[h][0] |= ((qh[mt][h].x >> sb) & 0x01010101u) << 4;
            w[h][1] |= ((qh[mt][h].y >> sb) & 0x01010101u) << 4;
          }
          cf[h] = reinterpret_cast<const float2*>(tab + (16 * mt + 8 * h + g) * 16)[sb];
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
          EpiK32<true>(acc[mt][nt], w[0][0], w[1][0], w[0][1], w[1][1], bx[nt], sc[nt], cf[0].x, cf[1].x, cf[0].y,
                       cf[1].y);
      }
    }
  }
}

template <int NT>
__device__ __forceinline__ void StageQ6K(const uint8_t* (&rp)[2][2], const XqSmem<GgmlType::Q6_K, NT>& xq,
                                         const float* tab, int g, int t, float (&acc)[2][NT][4]) {
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
        const int u = 4 * hh + q;
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
          float coef[2];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const uint32_t ql = (q & 1) ? qb[mt][h] : qa[mt][h];
            const uint32_t lo4 = (ql >> (4 * (q >> 1))) & 0x0F0F0F0Fu;
            const uint32_t hi2 = ((qc[mt][h] >> (2 * q)) & 0x03030303u) << 4;
            w[h] = lo4 | hi2;
            coef[h] = tab[(16 * mt + 8 * h + g) * 16 + 8 * hh + 2 * q + hf];
          }
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const float sum0 = hf ? sm[nt].y : sm[nt].x, sum1 = hf ? sm[nt].w : sm[nt].z;
            EpiK16(acc[mt][nt], w[0], w[1], bh[nt], bl[nt], sc[nt].x, sc[nt].z, sum0, sum1, coef[0], coef[1],
                   __fmul_rn(-32.0f, coef[0]), __fmul_rn(-32.0f, coef[1]));
          }
        }
      }
    }
  }
}

// ---- the kernel ----
// Block: W warps, warp w owns rows [32w, 32w+32) of the block's row range; all
// warps walk the same stages (the activation fragments of a stage are copied
// once per block). grid.x: row blocks of up to 3 matrices (same type and K,
// same activations: q/k/v, gate/up); grid.y: K-split. With a K-split, blocks
// write partials and the last block of a row range sums them in split order.
struct MmqMatArgs {
  const uint8_t* w;
  size_t row_bytes;
  int64_t rows;
  const float* bias;
  float* y;
  int rb0;        // first row block of this matrix
  int64_t row0g;  // its first row in the partials' row space
};
struct MmqArgs {
  MmqMatArgs m[kMmqMaxMats];
  int n_mats;
  int64_t k;
  const uint8_t* xq;
  int n;
  int ksplit;
  int64_t part_rows;  // rows of the partials' row space
  float* part;
  int* counters;
};

// Three stages in flight for the compact formats with one column tile; two
// where a stage is large (keeps two blocks per multiprocessor on an H100/H200).
template <GgmlType T, int NT>
constexpr int StagesFor() {
  return NT == 1 && Mq<T>::kStride <= 176 ? 3 : 2;
}
template <GgmlType T, int NT>
constexpr int StageBytes(int warps) {
  return warps * 32 * Mq<T>::kStride + kUnitsPerStage * XqGeo<T, NT>::kXU;
}
template <GgmlType T, int NT>
constexpr int SmemBytes(int warps) {
  return StagesFor<T, NT>() * StageBytes<T, NT>(warps) + warps * kTableBytes + 64;
}

template <GgmlType T, int NT>
__global__ void __launch_bounds__(128) MmqKernel(MmqArgs a) {
  extern __shared__ __align__(16) uint8_t smem[];
  constexpr int kStride = Mq<T>::kStride, kWin = Mq<T>::kWin, kStage = Mq<T>::kStage;
  constexpr int kXU = XqGeo<T, NT>::kXU, kStages = StagesFor<T, NT>();
  const int W = blockDim.x >> 5;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;
  const int bx = blockIdx.x, ks = blockIdx.y;
  int mi = 0;
#pragma unroll
  for (int i = 1; i < kMmqMaxMats; ++i)
    if (i < a.n_mats && bx >= a.m[i].rb0) mi = i;
  const MmqMatArgs& m = a.m[mi];
  const int64_t rblock0 = static_cast<int64_t>(bx - m.rb0) * (W * 32);
  const int64_t n_units = a.k / 32;
  const int n_stages = static_cast<int>((n_units + kUnitsPerStage - 1) / kUnitsPerStage);
  const int s0 = static_cast<int>(static_cast<int64_t>(ks) * n_stages / a.ksplit);
  const int s1 = static_cast<int>(static_cast<int64_t>(ks + 1) * n_stages / a.ksplit);
  const int ns = s1 - s0;
  const int stage_bytes = StageBytes<T, NT>(W);
  float* tab = reinterpret_cast<float*>(smem + kStages * stage_bytes) + warp * (kTableBytes / 4);

  auto issue = [&](int i) {
    const int s = s0 + i;
    uint8_t* buf = smem + (i % kStages) * stage_bytes;
    const int64_t sb = static_cast<int64_t>(s) * kStage;
    const int64_t nbytes = min(static_cast<int64_t>(kStage), static_cast<int64_t>(m.row_bytes) - sb);
    for (int c = tid; c < W * 32 * kWin; c += blockDim.x) {
      const int r = c / kWin, ch = c - r * kWin;
      const int64_t row = rblock0 + r;
      if (row >= m.rows) continue;
      const uintptr_t g0 = reinterpret_cast<uintptr_t>(m.w + row * m.row_bytes + sb);
      const uintptr_t al = g0 & ~uintptr_t{15};
      const int nch = static_cast<int>((((g0 + nbytes + 15) & ~uintptr_t{15}) - al) / 16);
      if (ch < nch) CpAsync16(buf + r * kStride + ch * 16, reinterpret_cast<const void*>(al + ch * 16));
    }
    // Activation fragments of the stage's units: fragments, {scale, sum32}, {sum16}.
    uint8_t* xb = buf + W * 32 * kStride;
    const int units = static_cast<int>(min(static_cast<int64_t>(kUnitsPerStage), n_units - static_cast<int64_t>(s) * 8));
    constexpr int kPieces = kXU / 16;
    for (int c = tid; c < units * kPieces; c += blockDim.x) {
      const int u = c / kPieces, pc = c - u * kPieces;
      int src;
      if (pc < XqGeo<T, NT>::kFrag / 16) src = pc * 16;
      else if (pc < (XqGeo<T, NT>::kFrag + XqGeo<T, NT>::kSc) / 16) src = kXqFrag + (pc - XqGeo<T, NT>::kFrag / 16) * 16;
      else src = kXqFrag + kXqSc + (pc - (XqGeo<T, NT>::kFrag + XqGeo<T, NT>::kSc) / 16) * 16;
      CpAsync16(xb + u * kXU + pc * 16, a.xq + (static_cast<int64_t>(s) * 8 + u) * kXqUnit + src);
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
    if (i < ns) issue(i);
    CpAsyncCommit();
  }
  for (int i = 0; i < ns; ++i) {
    if (i + kStages - 1 < ns) issue(i + kStages - 1);
    CpAsyncCommit();
    CpAsyncWait<kStages - 1>();
    __syncthreads();
    const int s = s0 + i;
    const uint8_t* buf = smem + (i % kStages) * stage_bytes;
    const int64_t sb = static_cast<int64_t>(s) * kStage;
    const int units = static_cast<int>(min(static_cast<int64_t>(kUnitsPerStage), n_units - static_cast<int64_t>(s) * 8));
    const uintptr_t wbase = reinterpret_cast<uintptr_t>(m.w) + static_cast<uintptr_t>(sb);
    {  // this warp's scale table: lane = row of its tile
      const int r = warp * 32 + lane;
      const int64_t row = min(rblock0 + r, m.rows - 1);
      const uint8_t* rowp = buf + r * kStride + ((wbase + row * m.row_bytes) & 15);
      BuildTable<T>(rowp, units, tab + lane * 16);
    }
    __syncwarp();
    const uint8_t* rp[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = warp * 32 + 16 * mt + 8 * h + g;
        const int64_t row = min(rblock0 + r, m.rows - 1);
        rp[mt][h] = buf + r * kStride + ((wbase + row * m.row_bytes) & 15);
      }
    const XqSmem<T, NT> xq{buf + W * 32 * kStride};
    if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
      StageK4<T, NT>(rp, xq, tab, g, t, acc);
    } else if constexpr (T == GgmlType::Q6_K) {
      StageQ6K<NT>(rp, xq, tab, g, t, acc);
    } else {
      StageLegacy<T, NT>(rp, units, xq, tab, g, t, acc);
    }
    __syncthreads();  // every warp is done with this buffer and its table
  }
  CpAsyncWait<0>();

  const int64_t row_w = rblock0 + warp * 32;  // this warp's first row
  if (a.ksplit == 1) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int64_t row = row_w + 16 * mt + g + 8 * (i >> 1);
          const int col = nt * 8 + 2 * t + (i & 1);
          if (row < m.rows && col < a.n) {
            float v = acc[mt][nt][i];
            if (m.bias) v = __fadd_rn(v, m.bias[row]);
            m.y[col * m.rows + row] = v;
          }
        }
    return;
  }
  // K-split: partials, then the last block of this row range sums them in order.
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t row = row_w + 16 * mt + g + 8 * (i >> 1);
        const int col = nt * 8 + 2 * t + (i & 1);
        if (row < m.rows && col < a.n)
          a.part[(static_cast<int64_t>(ks) * 16 + col) * a.part_rows + m.row0g + row] = acc[mt][nt][i];
      }
  __threadfence();
  __syncthreads();
  __shared__ int last;
  if (tid == 0) last = atomicAdd(&a.counters[bx], 1) == a.ksplit - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t row = row_w + 16 * mt + g + 8 * (i >> 1);
        const int col = nt * 8 + 2 * t + (i & 1);
        if (row < m.rows && col < a.n) {
          const float* p = a.part + static_cast<int64_t>(col) * a.part_rows + m.row0g + row;
          float v = __ldcg(p);
          for (int k2 = 1; k2 < a.ksplit; ++k2) v = __fadd_rn(v, __ldcg(p + static_cast<int64_t>(k2) * 16 * a.part_rows));
          if (m.bias) v = __fadd_rn(v, m.bias[row]);
          m.y[col * m.rows + row] = v;
        }
      }
  if (tid == 0) a.counters[bx] = 0;  // ready for the next launch (graphs replay it)
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

// ======================================================================
// v2: register-streaming matvec for Q4_K, Q5_K, Q6_K and Q8_0 (K % 256 == 0).
//
// No shared memory for weights: each warp owns 32 rows (two 16-row MMA
// tiles) and streams its quants from global memory straight into the A
// fragments of the integer MMA (8-byte loads, one K-stage of 128 elements
// in flight while the previous one is computed, an optional L2 prefetch two
// 256-element groups ahead). The activations are the same hi/lo int8 units
// as v1 (QuantizeUnitWarp), read from L1/L2 as B fragments. A block is 4
// warps on 128 consecutive rows and one K-chunk; grid.y splits K like v1
// (partials summed in split order by the last block).
//
// Per 256-element group, per output element (row r, column c), every unit
// (Q6_K: every 16-element half) gives an exact int32 dot D = 254*D_hi + D_lo
// and a float term e = D * (coef_r * s_c) [+ mcoef_r * sum_c]; the group's
// terms are summed by a fixed binary tree per 128-element stage (pairs of
// units, then pairs of pairs) and the two stage sums are added to the row's
// accumulator in order. The tree is the same for
// every column count; only where its levels run changes: with n == 1 the
// units of a group occupy the 8 MMA columns (masked activations), so the low
// levels are across lanes (shuffles) and the epilogue runs on 1/8 of the
// (row, column) pairs; with n >= 2 each lane holds all units of its columns.
// Integer dots are exact and fp additions commute, so a column's bits never
// depend on n.
//
// v3 (Mv2Kernel with RING 1/2, the default) is the same kernel with the
// weight stream moved into a per-warp ring of `depth` 128-element stages in
// dynamic shared memory, filled by cp.async depth - 1 stages ahead (plus the
// group headers in each stage-0 slot); see Ring / IssueStage / ReadStage.
// Only where the bytes come from changes, so v3 is bit-identical to v2.
// ======================================================================
namespace mv2 {

constexpr int kWarps = 4;
constexpr int kRowsW = 32;
constexpr int kRowsB = kWarps * kRowsW;
constexpr int kTab = 16;  // table floats per row

__device__ __forceinline__ uint2 Ld64(const uint8_t* p) {
  uint2 v;
  asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t Ld32(const uint8_t* p) {
  uint32_t v;
  asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 Ld128(const uint8_t* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}
__device__ __forceinline__ uint32_t Ld16(const uint8_t* p) {
  unsigned short v;
  asm("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ void PrefetchL2(const uint8_t* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// Activations (read by every warp of a block: cached in L1).
__device__ __forceinline__ uint4 XFrag(const uint8_t* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

template <bool kU8>
__device__ __forceinline__ void Mma(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kU8) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// d = A * B (no accumulator input: the C operand is the zero register).
template <bool kU8>
__device__ __forceinline__ void Mma0(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kU8) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
  } else {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
  }
}

// Level-1 pair of the tree: units a, b of one row and column.
__device__ __forceinline__ float PairMin(int da, int db, float ca, float mca, float cb, float mcb, float sa, float sua,
                                         float sb, float sub) {
  float x = __fmul_rn(mca, sua);
  x = __fmaf_rn(__int2float_rn(da), __fmul_rn(ca, sa), x);
  x = __fmaf_rn(mcb, sub, x);
  return __fmaf_rn(__int2float_rn(db), __fmul_rn(cb, sb), x);
}
// Q6_K: the two 16-element halves of one unit (one activation scale s).
__device__ __forceinline__ float PairHalves(int d0, int d1, float c0, float c1, float s) {
  return __fmul_rn(__fmaf_rn(__int2float_rn(d1), c1, __fmul_rn(__int2float_rn(d0), c0)), s);
}
__device__ __forceinline__ float PairNoMin(int da, int db, float ca, float cb, float sa, float sb) {
  const float x = __fmul_rn(__int2float_rn(da), __fmul_rn(ca, sa));
  return __fmaf_rn(__int2float_rn(db), __fmul_rn(cb, sb), x);
}

// Quant registers of one 128-element stage for the lane's 4 rows
// [m-tile][row g / g+8].
template <GgmlType T> struct Raw;
template <> struct Raw<GgmlType::Q4_K> {
  uint2 q[2][2][2];  // [mt][h][pair of the stage]
};
template <> struct Raw<GgmlType::Q5_K> {
  uint2 q[2][2][2];
  uint2 qh[2][2];
};
template <> struct Raw<GgmlType::Q6_K> {
  uint32_t w[2][2][3][3];  // chunks ql(q even), ql(q odd), qh; 3 aligned words each
};
template <> struct Raw<GgmlType::Q8_0> {
  uint32_t w[2][2][4][3];  // 4 blocks, up to 3 words each
};

// Loads stage st (0/1) of the group that starts kOff bytes after rp[mt][h]
// (row g + 8h + 16mt); kOff is 0 or the group size (the next group).
template <GgmlType T, int kOff>
__device__ __forceinline__ void LoadStage(Raw<T>& r, const uint8_t* const (&rp)[2][2], int st, int t) {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint8_t* p = rp[mt][h] + kOff;
      if constexpr (T == GgmlType::Q4_K) {
#pragma unroll
        for (int pp = 0; pp < 2; ++pp) r.q[mt][h][pp] = Ld64(p + 16 + 32 * (2 * st + pp) + 8 * t);
      } else if constexpr (T == GgmlType::Q5_K) {
#pragma unroll
        for (int pp = 0; pp < 2; ++pp) r.q[mt][h][pp] = Ld64(p + 48 + 32 * (2 * st + pp) + 8 * t);
        r.qh[mt][h] = Ld64(p + 16 + 8 * t);
      } else if constexpr (T == GgmlType::Q6_K) {
        // Chunks start at multiples of 8 from the (2-byte aligned) group start.
        const uint8_t* pa =
            reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{3}) + 8 * t;
        const int off[3] = {64 * st, 64 * st + 32, 128 + 32 * st};
#pragma unroll
        for (int c = 0; c < 3; ++c) {
          r.w[mt][h][c][0] = Ld32(pa + off[c]);
          r.w[mt][h][c][1] = Ld32(pa + off[c] + 4);
          r.w[mt][h][c][2] = Ld32(pa + off[c] + 8);
        }
      } else {  // Q8_0: the group (272 B) starts 16-byte aligned; block u at 34u, quants at +2
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint8_t* q = p + 34 * (4 * st + j) + 2 + 8 * t;  // q % 8 == {2, 4, 6, 0}[j]
          if (j == 0) {
            const uint2 v = Ld64(q - 2);
            r.w[mt][h][j][0] = v.x, r.w[mt][h][j][1] = v.y, r.w[mt][h][j][2] = Ld32(q + 6);
          } else if (j == 1) {
            r.w[mt][h][j][0] = Ld32(q), r.w[mt][h][j][1] = Ld32(q + 4);
          } else if (j == 2) {
            const uint2 v = Ld64(q + 2);
            r.w[mt][h][j][0] = Ld32(q - 2), r.w[mt][h][j][1] = v.x, r.w[mt][h][j][2] = v.y;
          } else {
            const uint2 v = Ld64(q);
            r.w[mt][h][j][0] = v.x, r.w[mt][h][j][1] = v.y;
          }
        }
      }
    }
}

// The two quant words (elements 8t..8t+3, 8t+4..8t+7 of unit j of the stage)
// of row (mt, h), as the MMA's int8/uint8 A values.
template <GgmlType T>
__device__ __forceinline__ void AWords(const Raw<T>& r, int mt, int h, int j, int st, uint32_t misb, uint32_t* w0,
                                       uint32_t* w1) {
  if constexpr (T == GgmlType::Q4_K) {
    // Low nibbles: unit 2p; high nibbles as 16*q (uint8), 1/16 folded into the coefficient.
    const uint32_t m = (j & 1) ? 0xF0F0F0F0u : 0x0F0F0F0Fu;
    *w0 = r.q[mt][h][j >> 1].x & m;
    *w1 = r.q[mt][h][j >> 1].y & m;
  } else if constexpr (T == GgmlType::Q5_K) {
    const int u = 4 * st + j;
    uint32_t x = r.q[mt][h][j >> 1].x, y = r.q[mt][h][j >> 1].y;
    if (j & 1) x >>= 4, y >>= 4;
    const uint32_t hx = u <= 4 ? r.qh[mt][h].x << (4 - u) : r.qh[mt][h].x >> (u - 4);
    const uint32_t hy = u <= 4 ? r.qh[mt][h].y << (4 - u) : r.qh[mt][h].y >> (u - 4);
    *w0 = (x & 0x0F0F0F0Fu) | (hx & 0x10101010u);
    *w1 = (y & 0x0F0F0F0Fu) | (hy & 0x10101010u);
  } else if constexpr (T == GgmlType::Q6_K) {
    // Byte = 4 * (q - 32) as int8: ((lo4 | hi2 << 4) ^ 0x20) << 2; 1/4 folded into the coefficient.
    // r.w[mt][h][c][0..1]: the aligned words (Q6View).
    const int c = j & 1;
    const uint32_t l0 = r.w[mt][h][c][0], l1 = r.w[mt][h][c][1];
    const uint32_t q0 = r.w[mt][h][2][0], q1 = r.w[mt][h][2][1];
    const uint32_t lo0 = (j >> 1) ? (l0 >> 2) : (l0 << 2), lo1 = (j >> 1) ? (l1 >> 2) : (l1 << 2);
    const int sh = 6 - 2 * j;
    *w0 = (lo0 & 0x3C3C3C3Cu) | ((q0 << sh) & 0xC0C0C0C0u);
    *w1 = (lo1 & 0x3C3C3C3Cu) | ((q1 << sh) & 0xC0C0C0C0u);
  } else {  // Q8_0
    if (j == 0 || j == 2) {
      *w0 = __funnelshift_r(r.w[mt][h][j][0], r.w[mt][h][j][1], 16);
      *w1 = __funnelshift_r(r.w[mt][h][j][1], r.w[mt][h][j][2], 16);
    } else {
      *w0 = r.w[mt][h][j][0];
      *w1 = r.w[mt][h][j][1];
    }
  }
}

// Q6_K: the stage's chunks shifted into place once (and the qh words' bit-1
// flip of the -32 encoding applied) before the units read them.
template <GgmlType T>
__device__ __forceinline__ Raw<T> Align(const Raw<T>& r, const uint32_t (&misb)[2][2]) {
  if constexpr (T == GgmlType::Q6_K) {
    Raw<T> o;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int c = 0; c < 3; ++c) {
          const uint32_t x = c == 2 ? 0xAAAAAAAAu : 0u;
          o.w[mt][h][c][0] = __funnelshift_r(r.w[mt][h][c][0], r.w[mt][h][c][1], misb[mt][h]) ^ x;
          o.w[mt][h][c][1] = __funnelshift_r(r.w[mt][h][c][1], r.w[mt][h][c][2], misb[mt][h]) ^ x;
          o.w[mt][h][c][2] = 0;
        }
    return o;
  } else {
    return r;
  }
}

template <GgmlType T>
__device__ __forceinline__ void AFrag(const Raw<T>& r, int mt, int j, int st, const uint32_t (&misb)[2][2],
                                      uint32_t (&a)[4]) {
  AWords<T>(r, mt, 0, j, st, misb[mt][0], &a[0], &a[2]);
  AWords<T>(r, mt, 1, j, st, misb[mt][1], &a[1], &a[3]);
}

// Per-group data of the lane's table row (lane L builds row L of its warp).
template <GgmlType T> struct Hdr;
template <> struct Hdr<GgmlType::Q4_K> { uint4 h; };
template <> struct Hdr<GgmlType::Q5_K> { uint4 h; };
template <> struct Hdr<GgmlType::Q6_K> { uint32_t w[5]; };
template <> struct Hdr<GgmlType::Q8_0> { uint32_t d[8]; };

template <GgmlType T>
__device__ __forceinline__ void LoadHdr(Hdr<T>& hd, const uint8_t* p) {
  if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
    hd.h = Ld128(p);
  } else if constexpr (T == GgmlType::Q6_K) {
    const uint8_t* a = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(p + 192) & ~uintptr_t{3});
#pragma unroll
    for (int i = 0; i < 5; ++i) hd.w[i] = Ld32(a + 4 * i);
  } else {
#pragma unroll
    for (int u = 0; u < 8; ++u) hd.d[u] = Ld16(p + 34 * u);
  }
}

// Byte k of w as float.
__device__ __forceinline__ float ByteF(uint32_t w, int k) { return static_cast<float>((w >> (8 * k)) & 0xFFu); }
__device__ __forceinline__ float SByteF(uint32_t w, int k) {
  return static_cast<float>(static_cast<int8_t>((w >> (8 * k)) & 0xFFu));
}

// Table row (kTab floats): Q4_K/Q5_K {coef, mcoef} per unit; Q6_K coef per
// 16-element half (index 2u + h); Q8_0 coef per block. Coefficients are exact
// products (fp16 scale x small integer), with the A encodings' factors
// (Q4_K odd units 16, Q6_K 4) divided out exactly.
template <GgmlType T>
__device__ __forceinline__ void BuildTable(const Hdr<T>& hd, uint32_t misb, float* row) {
  if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
    const uint4 h = hd.h;
    const float d = H2F(static_cast<uint16_t>(h.x & 0xFFFFu)), dm = H2F(static_cast<uint16_t>(h.x >> 16));
    const float dodd = T == GgmlType::Q4_K ? __fmul_rn(d, 0.0625f) : d;
    const uint32_t sc03 = h.y & 0x3F3F3F3Fu, m03 = h.z & 0x3F3F3F3Fu;
    const uint32_t sc47 = (h.w & 0x0F0F0F0Fu) | ((h.y >> 2) & 0x30303030u);
    const uint32_t m47 = ((h.w >> 4) & 0x0F0F0F0Fu) | ((h.z >> 2) & 0x30303030u);
    float v[16];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const uint32_t sw = u < 4 ? sc03 : sc47, mw = u < 4 ? m03 : m47;
      v[2 * u] = __fmul_rn((u & 1) ? dodd : d, ByteF(sw, u & 3));
      v[2 * u + 1] = -__fmul_rn(dm, ByteF(mw, u & 3));
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
      reinterpret_cast<float4*>(row)[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
  } else if constexpr (T == GgmlType::Q6_K) {
    uint32_t sw[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) sw[i] = __funnelshift_r(hd.w[i], hd.w[i + 1], misb);
    const float d4 = __fmul_rn(H2F(static_cast<uint16_t>((hd.w[4] >> misb) & 0xFFFFu)), 0.25f);
    float v[16];
#pragma unroll
    for (int q = 0; q < 16; ++q) v[q] = __fmul_rn(d4, SByteF(sw[q >> 2], q & 3));
#pragma unroll
    for (int i = 0; i < 4; ++i)
      reinterpret_cast<float4*>(row)[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
  } else {
    float v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = H2F(static_cast<uint16_t>(hd.d[u]));
    reinterpret_cast<float4*>(row)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(row)[1] = make_float4(v[4], v[5], v[6], v[7]);
  }
}

// Runtime options (process-wide, set before recording).
struct Opts {
  int prefetch = 0;  // prefetch.global.L2 of the lane's table row two groups ahead
  int depth = 4;     // v3: ring slots per warp (2..kMaxDepth); set by the launcher
  int l2hint = 0;    // v3: cp.async with the .L2::128B prefetch-size hint
  int n_rb = 0;      // v3 persistent: row blocks (work item = ks * n_rb + row block)
};

// ---- v3: per-warp cp.async ring ----
// The same kernel with the weight stream in shared memory instead of
// registers: each warp owns `depth` slots of one 128-element stage; lane L
// copies exactly the bytes v2's lane L loads into Raw<T> (and, in a group's
// stage-0 slot, the header v2 loads into Hdr<T>) with cp.async of the same
// sizes and addresses, and reads them back into Raw<T>/Hdr<T> itself, so
// cp.async.wait_group is the only synchronization and the arithmetic is v2's
// (bit-identical). Slot layout, piece-major so every access is conflict-free:
// [kQ8 x 32 lanes x 8 B][kQ4 x 32 x 4 B][kH16 x 32 x 16 B][kH4 x 32 x 4 B].
constexpr int kMaxDepth = 8;
template <GgmlType T> struct Ring;
template <> struct Ring<GgmlType::Q4_K> { static constexpr int kQ8 = 8, kQ4 = 0, kH16 = 1, kH4 = 0; };
template <> struct Ring<GgmlType::Q5_K> { static constexpr int kQ8 = 12, kQ4 = 0, kH16 = 1, kH4 = 0; };
template <> struct Ring<GgmlType::Q6_K> { static constexpr int kQ8 = 0, kQ4 = 36, kH16 = 0, kH4 = 5; };
template <> struct Ring<GgmlType::Q8_0> { static constexpr int kQ8 = 12, kQ4 = 16, kH16 = 0, kH4 = 8; };
template <GgmlType T>
constexpr int RingOff4() { return Ring<T>::kQ8 * 256; }
template <GgmlType T>
constexpr int RingOffH16() { return RingOff4<T>() + Ring<T>::kQ4 * 128; }
template <GgmlType T>
constexpr int RingOffH4() { return RingOffH16<T>() + Ring<T>::kH16 * 512; }
template <GgmlType T>
constexpr int RingSlot() { return RingOffH4<T>() + Ring<T>::kH4 * 128; }  // bytes per warp and slot

__device__ __forceinline__ void Cp4(uint32_t dst, const uint8_t* src, int hint) {
  if (hint) asm volatile("cp.async.ca.shared.global.L2::128B [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
  else asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void Cp8(uint32_t dst, const uint8_t* src, int hint) {
  if (hint) asm volatile("cp.async.ca.shared.global.L2::128B [%0], [%1], 8;" ::"r"(dst), "l"(src) : "memory");
  else asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void Cp16(uint32_t dst, const uint8_t* src, int hint) {
  if (hint) asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
  else asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void CpCommit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Wait until at most n (= depth - 1, uniform) groups are pending.
__device__ __forceinline__ void CpWaitPending(int n) {
  switch (n) {
    case 1: asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;" ::: "memory"); break;
    case 6: asm volatile("cp.async.wait_group 6;" ::: "memory"); break;
    case 7: asm volatile("cp.async.wait_group 7;" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;
  }
}

// Issues the copies of stage st of the group at rp[mt][h] + off (and, for
// st == 0, the header of the lane's table row at tp + off) into the slot at
// shared address slot (lane offsets added here). Same addresses and sizes as
// LoadStage / LoadHdr.
//
// kCoop (Q4_K/Q5_K/Q6_K): the quad of row g copies the row's stage bytes with
// 16-byte cp.async.cg (L1 bypassed, fewer copies) and each lane reads its
// pieces, written by other lanes of its quad, so the wait is followed by
// __syncwarp (ring_next). Q4_K/Q5_K: the 64 quant bytes stored [row r][pair
// pp][g][32 B], lane t's piece at +8t (Q5_K: qh [r][g][32 B] after 2 KB).
// Q6_K (rows 2-byte aligned): per (r, g) a 144-byte region holding the
// 16-byte-aligned windows [ql: 80 B][qh: 48 B] around the stage's ql bytes
// (A + 64st + [0, 68)) and qh bytes (A + 128 + 32st + [0, 36)), A = the
// row's group start rounded down to 4; lane t's word w of chunk c sits at
// (A & 15) + 32c + 8t + 4w (qh: 80 + (A & 15) + 8t + 4w).
template <GgmlType T>
constexpr bool CoopOk() {
  return T == GgmlType::Q4_K || T == GgmlType::Q5_K || T == GgmlType::Q6_K;
}
constexpr int kQ6Region = 144;
template <GgmlType T, bool kCoop>
__device__ __forceinline__ void IssueStage(uint32_t slot, const uint8_t* const (&rp)[2][2], const uint8_t* tp,
                                           int64_t off, int st, int lane, int t, int hint) {
  using R = Ring<T>;
  const uint32_t q8 = slot + 8 * lane, q4 = slot + RingOff4<T>() + 4 * lane;
  const int g = lane >> 2;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint8_t* p = rp[mt][h] + off;
      const int r = 2 * mt + h;
      if constexpr (kCoop && T == GgmlType::Q6_K) {
        // Chunks t and t + 4 of the row's 8: 0..4 the ql window, 5..7 the qh window.
        const uintptr_t a = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{3};
        const uint8_t* bq = reinterpret_cast<const uint8_t*>((a + 64 * st) & ~uintptr_t{15});
        const uint8_t* bh = reinterpret_cast<const uint8_t*>((a + 128 + 32 * st) & ~uintptr_t{15});
        const uint32_t reg = slot + kQ6Region * (r * 8 + g);
        Cp16(reg + 16 * t, bq + 16 * t, hint);
        if (t == 0) Cp16(reg + 64, bq + 64, hint);
        else Cp16(reg + 16 * (t + 4), bh + 16 * (t - 1), hint);
      } else if constexpr (kCoop) {
        static_assert(CoopOk<T>());
        constexpr int kQ = T == GgmlType::Q4_K ? 16 : 48;  // quants' offset in the group
        const int pp = t >> 1, c = t & 1;
        Cp16(slot + 32 * ((2 * r + pp) * 8 + g) + 16 * c, p + kQ + 32 * (2 * st + pp) + 16 * c, hint);
        if constexpr (T == GgmlType::Q5_K) {
          // qh: 2 chunks per row, rows r = t/2 and 2 + t/2 of this lane's quad.
          if ((r & 1) == (t >> 1))
            Cp16(slot + 2048 + 32 * (r * 8 + g) + 16 * c, p + 16 + 16 * c, hint);
        }
      } else if constexpr (T == GgmlType::Q4_K) {
#pragma unroll
        for (int pp = 0; pp < 2; ++pp) Cp8(q8 + 256 * (2 * r + pp), p + 16 + 32 * (2 * st + pp) + 8 * t, hint);
      } else if constexpr (T == GgmlType::Q5_K) {
#pragma unroll
        for (int pp = 0; pp < 2; ++pp) Cp8(q8 + 256 * (3 * r + pp), p + 48 + 32 * (2 * st + pp) + 8 * t, hint);
        Cp8(q8 + 256 * (3 * r + 2), p + 16 + 8 * t, hint);
      } else if constexpr (T == GgmlType::Q6_K) {
        const uint8_t* pa =
            reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{3}) + 8 * t;
        const int offc[3] = {64 * st, 64 * st + 32, 128 + 32 * st};
#pragma unroll
        for (int c = 0; c < 3; ++c)
#pragma unroll
          for (int w = 0; w < 3; ++w) Cp4(q4 + 128 * ((3 * r + c) * 3 + w), pa + offc[c] + 4 * w, hint);
      } else {  // Q8_0: per row 8-byte pieces j0, j2, j3 and words j0[2], j1[0..1], j2[0]
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint8_t* q = p + 34 * (4 * st + j) + 2 + 8 * t;
          if (j == 0) {
            Cp8(q8 + 256 * (3 * r + 0), q - 2, hint);
            Cp4(q4 + 128 * (4 * r + 0), q + 6, hint);
          } else if (j == 1) {
            Cp4(q4 + 128 * (4 * r + 1), q, hint);
            Cp4(q4 + 128 * (4 * r + 2), q + 4, hint);
          } else if (j == 2) {
            Cp4(q4 + 128 * (4 * r + 3), q - 2, hint);
            Cp8(q8 + 256 * (3 * r + 1), q + 2, hint);
          } else {
            Cp8(q8 + 256 * (3 * r + 2), q, hint);
          }
        }
      }
    }
  if (st == 0) {
    const uint8_t* hp = tp + off;
    if constexpr (R::kH16 > 0) {
      Cp16(slot + RingOffH16<T>() + 16 * lane, hp, hint);
    } else if constexpr (T == GgmlType::Q6_K) {
      const uint8_t* a = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(hp + 192) & ~uintptr_t{3});
#pragma unroll
      for (int i = 0; i < 5; ++i) Cp4(slot + RingOffH4<T>() + 128 * i + 4 * lane, a + 4 * i, hint);
    } else {  // Q8_0: the aligned word holding d of block u (low half for even u, high for odd)
#pragma unroll
      for (int u = 0; u < 8; ++u) Cp4(slot + RingOffH4<T>() + 128 * u + 4 * lane, hp + 34 * u - 2 * (u & 1), hint);
    }
  }
}

// Reads back the lane's pieces of a slot (generic pointer to the slot).
// rp: the current group's row pointers (Q6_K coop: the windows' offsets).
template <GgmlType T, bool kCoop>
__device__ __forceinline__ void ReadStage(Raw<T>& r, const uint8_t* slot, int lane,
                                          const uint8_t* const (&rp)[2][2]) {
  const uint2* q8 = reinterpret_cast<const uint2*>(slot) + lane;
  const uint32_t* q4 = reinterpret_cast<const uint32_t*>(slot + RingOff4<T>()) + lane;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int rr = 2 * mt + h;
      if constexpr (kCoop && T == GgmlType::Q6_K) {
        const int mis = static_cast<int>(reinterpret_cast<uintptr_t>(rp[mt][h]) & 12);
        const uint8_t* reg = slot + kQ6Region * (rr * 8 + (lane >> 2)) + mis + 8 * (lane & 3);
#pragma unroll
        for (int c = 0; c < 3; ++c)
#pragma unroll
          for (int w = 0; w < 3; ++w)
            r.w[mt][h][c][w] = *reinterpret_cast<const uint32_t*>(reg + (c == 2 ? 80 : 32 * c) + 4 * w);
      } else if constexpr (kCoop) {
        // [rr][pp][g][32 B] + 8t is 8 B * (32 (2 rr + pp) + lane): the same index as the per-lane layout's
        // piece 2 rr + pp; Q5_K qh at 2048 + [rr][g][32 B] + 8t = 8 B * (256 + 32 rr + lane).
        if constexpr (T == GgmlType::Q4_K) {
#pragma unroll
          for (int pp = 0; pp < 2; ++pp) r.q[mt][h][pp] = q8[32 * (2 * rr + pp)];
        } else {
#pragma unroll
          for (int pp = 0; pp < 2; ++pp) r.q[mt][h][pp] = q8[32 * (2 * rr + pp)];
          r.qh[mt][h] = q8[256 + 32 * rr];
        }
      } else if constexpr (T == GgmlType::Q4_K) {
#pragma unroll
        for (int pp = 0; pp < 2; ++pp) r.q[mt][h][pp] = q8[32 * (2 * rr + pp)];
      } else if constexpr (T == GgmlType::Q5_K) {
#pragma unroll
        for (int pp = 0; pp < 2; ++pp) r.q[mt][h][pp] = q8[32 * (3 * rr + pp)];
        r.qh[mt][h] = q8[32 * (3 * rr + 2)];
      } else if constexpr (T == GgmlType::Q6_K) {
#pragma unroll
        for (int c = 0; c < 3; ++c)
#pragma unroll
          for (int w = 0; w < 3; ++w) r.w[mt][h][c][w] = q4[32 * ((3 * rr + c) * 3 + w)];
      } else {
        const uint2 v0 = q8[32 * (3 * rr + 0)], v2 = q8[32 * (3 * rr + 1)], v3 = q8[32 * (3 * rr + 2)];
        r.w[mt][h][0][0] = v0.x, r.w[mt][h][0][1] = v0.y, r.w[mt][h][0][2] = q4[32 * (4 * rr + 0)];
        r.w[mt][h][1][0] = q4[32 * (4 * rr + 1)], r.w[mt][h][1][1] = q4[32 * (4 * rr + 2)];
        r.w[mt][h][2][0] = q4[32 * (4 * rr + 3)], r.w[mt][h][2][1] = v2.x, r.w[mt][h][2][2] = v2.y;
        r.w[mt][h][3][0] = v3.x, r.w[mt][h][3][1] = v3.y;
      }
    }
}

template <GgmlType T>
__device__ __forceinline__ void ReadHdr(Hdr<T>& hd, const uint8_t* slot, int lane) {
  if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
    hd.h = reinterpret_cast<const uint4*>(slot + RingOffH16<T>())[lane];
  } else if constexpr (T == GgmlType::Q6_K) {
#pragma unroll
    for (int i = 0; i < 5; ++i) hd.w[i] = reinterpret_cast<const uint32_t*>(slot + RingOffH4<T>())[32 * i + lane];
  } else {
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const uint32_t w = reinterpret_cast<const uint32_t*>(slot + RingOffH4<T>())[32 * u + lane];
      hd.d[u] = (u & 1) ? w >> 16 : w & 0xFFFFu;
    }
  }
}

// MODE 1: n == 1; 8: n <= 8; 16: n <= 16.
// Resident blocks per multiprocessor the register allocation aims for
// (from -Xptxas -v on sm_90: Q4_K n == 1 fits 128 registers without spills;
// the others fit 168 with at most ~100 bytes of spills).
template <GgmlType T, int MODE, bool kRing>
constexpr int Mv2MinBlocks() {
  if (MODE == 16) return 1;
  if (kRing) return T == GgmlType::Q6_K ? 3 : 4;  // v3 (no register double buffer): 128 registers but Q6_K
  if (MODE == 1) return T == GgmlType::Q4_K ? 4 : 3;
  return 3;
}

// RING: 0 = v2 (weights streamed into registers, one stage ahead); 1 = v3,
// an o.depth-slot cp.async ring per warp in dynamic shared memory, each lane
// copying its own pieces; 2 = v3 with the quad-cooperative 16-byte copies
// (Q4_K/Q5_K/Q6_K).
//
// PERSIST (v3 only): a grid of (resident blocks x SMs) blocks, each taking the
// work items (row block, K-split part) blockIdx.x, + gridDim.x, ... in order;
// the ring's issue side runs on into the next item, so only the block's first
// item waits for a fill. Each item computes exactly what the one-item block
// computes (same partials, same last-block sum), so results are unchanged.
template <GgmlType T, int MODE, int RING, bool PERSIST = false>
__global__ void __launch_bounds__(kWarps * 32, (Mv2MinBlocks<T, MODE, RING != 0>())) Mv2Kernel(MmqArgs a, Opts o) {
  using F = mv2t::Fmt<T>;
  constexpr bool kRing = RING != 0, kCoop = RING == 2;
  static_assert(!PERSIST || kRing);
  extern __shared__ __align__(16) uint8_t ring_all[];
  constexpr int NT = MODE == 16 ? 2 : 1;
  constexpr bool kU8 = F::kU8;
  __shared__ __align__(16) float tab_all[kWarps][kRowsW * kTab];
  __shared__ int last;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int depth = kRing ? o.depth : 2;
  const int n_items = PERSIST ? o.n_rb * a.ksplit : 1;
  int item = PERSIST ? static_cast<int>(blockIdx.x) : 0;
  // Ring slots (v3; both sides persist across a PERSIST block's items).
  int slot_w = 0, slot_r = 0;
  // PERSIST issue side: the item being issued, its rows at the group being
  // issued, and the stage within it.
  const uint8_t* irp[2][2] = {{nullptr, nullptr}, {nullptr, nullptr}};
  const uint8_t* itp = nullptr;
  int iit = item, iq = 0, inq = 0;
  // Rows (at group s0) and stage count of work item it (PERSIST).
  auto geom = [&](int it, const uint8_t* (&p)[2][2], const uint8_t*& tq, int& nst) {
    const int gbx = it % o.n_rb, gks = it / o.n_rb;
    int gmi = 0;
#pragma unroll
    for (int i = 1; i < kMmqMaxMats; ++i)
      if (i < a.n_mats && gbx >= a.m[i].rb0) gmi = i;
    const uint8_t* gW = a.m[0].w;
    size_t grb = a.m[0].row_bytes;
    int64_t grows = a.m[0].rows;
    int grb0 = a.m[0].rb0;
#pragma unroll
    for (int i = 1; i < kMmqMaxMats; ++i)
      if (gmi == i) gW = a.m[i].w, grb = a.m[i].row_bytes, grows = a.m[i].rows, grb0 = a.m[i].rb0;
    const int64_t grw0 = static_cast<int64_t>(gbx - grb0) * kRowsB + warp * kRowsW;
    const int gS = static_cast<int>(a.k / 256);
    const int gs0 = static_cast<int>(static_cast<int64_t>(gks) * gS / a.ksplit);
    const int gs1 = static_cast<int>(static_cast<int64_t>(gks + 1) * gS / a.ksplit);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        p[mt][h] = gW + min(grw0 + 16 * mt + 8 * h + g, grows - 1) * grb + static_cast<size_t>(gs0) * F::kGroup;
    tq = gW + min(grw0 + lane, grows - 1) * grb + static_cast<size_t>(gs0) * F::kGroup;
    nst = 2 * max(gs1 - gs0, 0);
  };
  // Moves the issue side to the next item with stages (iit >= n_items: none left).
  auto next_issue_item = [&](int first) {
    iit = first;
    iq = 0;
    inq = 0;
    while (iit < n_items) {
      geom(iit, irp, itp, inq);
      if (inq > 0) break;
      iit += gridDim.x;
    }
  };
  if constexpr (PERSIST) next_issue_item(item);
  bool primed = false;
  for (;;) {  // one pass per work item (PERSIST); a single pass otherwise
  const int bx = PERSIST ? item % o.n_rb : static_cast<int>(blockIdx.x);
  const int ks = PERSIST ? item / o.n_rb : static_cast<int>(blockIdx.y);
  int mi = 0;
#pragma unroll
  for (int i = 1; i < kMmqMaxMats; ++i)
    if (i < a.n_mats && bx >= a.m[i].rb0) mi = i;
  const uint8_t* W = a.m[0].w;
  size_t row_bytes = a.m[0].row_bytes;
  int64_t rows = a.m[0].rows;
  const float* bias = a.m[0].bias;
  float* Y = a.m[0].y;
  int rb0 = a.m[0].rb0;
  int64_t row0g = a.m[0].row0g;
#pragma unroll
  for (int i = 1; i < kMmqMaxMats; ++i)
    if (mi == i) {
      W = a.m[i].w, row_bytes = a.m[i].row_bytes, rows = a.m[i].rows, bias = a.m[i].bias, Y = a.m[i].y;
      rb0 = a.m[i].rb0, row0g = a.m[i].row0g;
    }
  const int64_t rw0 = static_cast<int64_t>(bx - rb0) * kRowsB + warp * kRowsW;  // this warp's first row
  const int S = static_cast<int>(a.k / 256);
  const int s0 = static_cast<int>(static_cast<int64_t>(ks) * S / a.ksplit);
  const int s1 = static_cast<int>(static_cast<int64_t>(ks + 1) * S / a.ksplit);
  const int n = a.n;
  const uint8_t* xq = a.xq;
  float* tab = tab_all[warp];

  // Current-group pointers (advanced by one group per iteration): the lane's 4
  // rows, its table row, and its activation bases (MODE 1: the frag of its
  // unit and the scales of its units; MODE 8/16: the frag of column g and the
  // scales of columns 2t, 2t+1), all of group s0.
  const uint8_t* rp[2][2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      rp[mt][h] = W + min(rw0 + 16 * mt + 8 * h + g, rows - 1) * row_bytes + static_cast<size_t>(s0) * F::kGroup;
  const uint8_t* tp = W + min(rw0 + lane, rows - 1) * row_bytes + static_cast<size_t>(s0) * F::kGroup;
  const uint8_t* xa;
  const uint8_t* xb;
  {
    const uint8_t* xg0 = xq + static_cast<int64_t>(8 * s0) * kXqUnit;
    if constexpr (MODE == 1) {
      xa = xg0 + (F::kHalves ? (g >> 1) : g) * kXqUnit + 16 * t;
      xb = xg0 + (F::kHalves ? t : 2 * t) * kXqUnit + kXqFrag;
    } else {
      xa = xg0 + (g * 4 + t) * 16;
      xb = xg0 + kXqFrag + 2 * t * 8;
    }
  }
  constexpr int kXg = 8 * kXqUnit;  // activation bytes per group
  const bool live = (t >> 1) == (g & 1);  // MODE 1 Q6_K: this lane's activations are used
  bool colv[NT], col2v[NT];           // MODE 8/16: column g / 2t of N-tile nt exists
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) colv[nt] = 8 * nt + g < n, col2v[nt] = 8 * nt + 2 * t < n;

  // Accumulators. MODE 1: [mt][row half] (every lane of a quad holds the same
  // value); MODE 8/16: [mt][nt][d fragment element].
  constexpr int kAcc = MODE == 1 ? 2 : 4 * NT;
  float acc[2][kAcc];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[mt][i] = 0.0f;

  Raw<T> r0, r1;
  Hdr<T> hd;
  // v3 ring state: stages are numbered q = 2 (s - s0) + st; stage q lives in
  // slot q % depth. Issued: stages < qi (all of them once qi == nq).
  // PERSIST: the stages of the block's items, in item order, one stream.
  const int nq = 2 * max(s1 - s0, 0);
  uint8_t* wring = ring_all + warp * depth * RingSlot<T>();
  const uint32_t wring_s = static_cast<uint32_t>(__cvta_generic_to_shared(wring));
  int qi = 0;
  int64_t ioff = 0;  // byte offset of stage qi's group from the current group (rp, tp)
  // Issues the next stage (if any) into slot_w and commits a group (empty past the end).
  auto ring_issue = [&]() {
    if constexpr (PERSIST) {
      if (iit < n_items) {
        IssueStage<T, kCoop>(wring_s + slot_w * RingSlot<T>(), irp, itp, 0, iq & 1, lane, t, o.l2hint);
        if (iq & 1) {
#pragma unroll
          for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) irp[mt][h] += F::kGroup;
          itp += F::kGroup;
        }
        slot_w = slot_w + 1 == depth ? 0 : slot_w + 1;
        if (++iq == inq) next_issue_item(iit + gridDim.x);
      }
    } else if (qi < nq) {
      IssueStage<T, kCoop>(wring_s + slot_w * RingSlot<T>(), rp, tp, ioff, qi & 1, lane, t, o.l2hint);
      if (qi & 1) ioff += F::kGroup;
      ++qi;
      slot_w = slot_w + 1 == depth ? 0 : slot_w + 1;
    }
    CpCommit();
  };
  // The next stage to compute: refill the slot read one step ago, wait for
  // this one (its group is depth - 1 commits back), read it.
  auto ring_next = [&](Hdr<T>* hdr) {
    __syncwarp();  // this lane's reads of the slot about to be refilled are done
    ring_issue();
    CpWaitPending(depth - 1);
    if constexpr (kCoop) __syncwarp();  // the quad's copies of this slot are complete and visible
    const uint8_t* sl = wring + slot_r * RingSlot<T>();
    Raw<T> r;
    ReadStage<T, kCoop>(r, sl, lane, rp);
    if (hdr) ReadHdr<T>(*hdr, sl, lane);
    slot_r = slot_r + 1 == depth ? 0 : slot_r + 1;
    return r;
  };
  // MODE 1 activations of a group (kOff: 0 this group, kXg the next):
  // Q4_K/Q5_K/Q8_0: the lane's unit g and {scale, sum} of units 2t, 2t+1;
  // Q6_K: unit g/2 of each stage (if live) and the scales of units t, 4+t.
  uint4 fr1 = make_uint4(0, 0, 0, 0), fr1b = make_uint4(0, 0, 0, 0);
  float4 sc1 = make_float4(0, 0, 0, 0);
  auto load_act1 = [&](auto offc) {
    constexpr int kOff = decltype(offc)::value;
    if constexpr (F::kHalves) {
      fr1 = live ? XFrag(xa + kOff) : make_uint4(0, 0, 0, 0);
      fr1b = live ? XFrag(xa + kOff + 4 * kXqUnit) : make_uint4(0, 0, 0, 0);
      sc1.x = __ldg(reinterpret_cast<const float*>(xb + kOff));
      sc1.y = __ldg(reinterpret_cast<const float*>(xb + kOff + 4 * kXqUnit));
    } else {
      fr1 = XFrag(xa + kOff);
      const float2 p = __ldg(reinterpret_cast<const float2*>(xb + kOff));
      const float2 q = __ldg(reinterpret_cast<const float2*>(xb + kOff + kXqUnit));
      sc1 = make_float4(p.x, p.y, q.x, q.y);
    }
  };
  // Q6_K rows are only 2-byte aligned: the shift of the lane's rows in this group.
  auto misbs = [&](uint32_t (&mb)[2][2]) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) mb[mt][h] = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(rp[mt][h]) & 3) * 8;
  };
  // The next group's stage 0 (and table header, MODE 1 activations); v3: the
  // activations only (the ring holds the weights and headers).
  auto load_next = [&]() {
    if constexpr (!kRing) {
      LoadStage<T, F::kGroup>(r0, rp, 0, t);
      LoadHdr<T>(hd, tp + F::kGroup);
    }
    if constexpr (MODE == 1) load_act1(std::integral_constant<int, kXg>{});
  };
  // Stage 1 of the current group.
  auto raw1 = [&]() -> Raw<T> {
    if constexpr (kRing) return ring_next(nullptr);
    else return r1;
  };

  if constexpr (kRing) {
    if (!primed)
      for (int i = 0; i + 1 < depth; ++i) ring_issue();
    primed = true;
  }
  if (s0 < s1) {
    if constexpr (!kRing) {
      LoadStage<T, 0>(r0, rp, 0, t);
      LoadHdr<T>(hd, tp);
    }
    if constexpr (MODE == 1) load_act1(std::integral_constant<int, 0>{});
  }
  for (int s = s0; s < s1; ++s) {
    if constexpr (kRing) r0 = ring_next(&hd);
    else LoadStage<T, 0>(r1, rp, 1, t);
    if (o.prefetch && s + 2 < s1) {
      PrefetchL2(tp + 2 * F::kGroup);
      PrefetchL2(tp + 2 * F::kGroup + 128);
      PrefetchL2(tp + 3 * F::kGroup - 1);
    }
    uint32_t misb[2][2] = {{0, 0}, {0, 0}};
    if constexpr (T == GgmlType::Q6_K) misbs(misb);
    const uint32_t tmisb =
        T == GgmlType::Q6_K ? static_cast<uint32_t>(reinterpret_cast<uintptr_t>(tp + 192) & 3) * 8 : 0;
    __syncwarp();  // every lane is done reading the previous group's table
    BuildTable<T>(hd, tmisb, tab + lane * kTab);
    __syncwarp();
    // This group's MODE 1 activations; the next group's are loaded during stage 1.
    const uint4 frA = fr1, frB = fr1b;
    const float4 scA = sc1;
    const bool more = s + 1 < s1;

    if constexpr (MODE == 1) {
      if constexpr (!F::kHalves) {
        // One chain of 8 units: unit u's activations sit in MMA column u.
        int dh[2][4] = {}, dl[2][4] = {};
        auto stage = [&](auto stc, const Raw<T>& rin) {
          constexpr int st = decltype(stc)::value;
          if (st == 1 && more) load_next();  // the next group's stage 0 streams in during stage 1
          const Raw<T> r = Align<T>(rin, misb);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int u = 4 * st + j;
            const bool mine = g == u;
            const uint32_t bh0 = mine ? frA.x : 0u, bh1 = mine ? frA.y : 0u;
            const uint32_t bl0 = mine ? frA.z : 0u, bl1 = mine ? frA.w : 0u;
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
              uint32_t af[4];
              AFrag<T>(r, mt, j, st, misb, af);
              Mma<kU8>(dh[mt], af, bh0, bh1);
              Mma<kU8>(dl[mt], af, bl0, bl1);
            }
          }
        };
        stage(std::integral_constant<int, 0>{}, r0);
        stage(std::integral_constant<int, 1>{}, raw1());
        // Lane t: units 2t, 2t+1 of rows g (d0, d1) and g+8 (d2, d3).
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const int rr = 16 * mt + 8 * hr + g;
            const int da = dh[mt][2 * hr] * 254 + dl[mt][2 * hr];
            const int db = dh[mt][2 * hr + 1] * 254 + dl[mt][2 * hr + 1];
            float p;
            if constexpr (F::kMin) {
              const float4 cf = reinterpret_cast<const float4*>(tab + rr * kTab)[t];
              p = PairMin(da, db, cf.x, cf.y, cf.z, cf.w, scA.x, scA.y, scA.z, scA.w);
            } else {
              const float2 cf = reinterpret_cast<const float2*>(tab + rr * kTab)[t];
              p = PairNoMin(da, db, cf.x, cf.y, scA.x, scA.z);
            }
            p = __fadd_rn(p, __shfl_xor_sync(kFull, p, 1));  // lanes 0,1: stage 0's units; 2,3: stage 1's
            const float q = __shfl_xor_sync(kFull, p, 2);
            acc[mt][hr] = __fadd_rn(__fadd_rn(acc[mt][hr], t < 2 ? p : q), t < 2 ? q : p);
          }
      } else {
        // Q6_K: per stage a chain of 4 units; column 2v + h holds half h of unit v.
        auto stage = [&](auto stc, const Raw<T>& rin) {
          constexpr int st = decltype(stc)::value;
          if (st == 1 && more) load_next();
          const Raw<T> r = Align<T>(rin, misb);
          const uint4 fr = st ? frB : frA;
          int dh[2][4] = {}, dl[2][4] = {};
#pragma unroll
          for (int v = 0; v < 4; ++v) {
            const bool mine = (g >> 1) == v;
            const uint32_t bh0 = mine ? fr.x : 0u, bh1 = mine ? fr.y : 0u;
            const uint32_t bl0 = mine ? fr.z : 0u, bl1 = mine ? fr.w : 0u;
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
              uint32_t af[4];
              AFrag<T>(r, mt, v, st, misb, af);
              Mma<kU8>(dh[mt], af, bh0, bh1);
              Mma<kU8>(dl[mt], af, bl0, bl1);
            }
          }
          const float sx = st ? scA.y : scA.x;  // scale of unit 4st + t, column 0
#pragma unroll
          for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
              const int rr = 16 * mt + 8 * hr + g;
              const float2 cf = reinterpret_cast<const float2*>(tab + rr * kTab)[4 * st + t];
              float p = PairHalves(dh[mt][2 * hr] * 254 + dl[mt][2 * hr], dh[mt][2 * hr + 1] * 254 + dl[mt][2 * hr + 1],
                                   cf.x, cf.y, sx);
              p = __fadd_rn(p, __shfl_xor_sync(kFull, p, 1));
              p = __fadd_rn(p, __shfl_xor_sync(kFull, p, 2));
              acc[mt][hr] = __fadd_rn(acc[mt][hr], p);
            }
        };
        stage(std::integral_constant<int, 0>{}, r0);
        stage(std::integral_constant<int, 1>{}, raw1());
      }
    } else {
      // MODE 8/16: lane (g, t) holds columns 8nt + 2t, +1 of every unit.
      auto stage = [&](auto stc, const Raw<T>& rin) {
        constexpr int st = decltype(stc)::value;
        if (st == 1 && more) load_next();
        const Raw<T> r = Align<T>(rin, misb);
        float sub[2][4 * NT];
        if constexpr (!F::kHalves) {
#pragma unroll
          for (int jp = 0; jp < 2; ++jp) {
            uint4 fr[2][NT];
            float4 sc[2][NT];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int uo = (4 * st + 2 * jp + e) * kXqUnit;
#pragma unroll
              for (int nt = 0; nt < NT; ++nt) {
                fr[e][nt] = colv[nt] ? XFrag(xa + uo + nt * 512) : make_uint4(0, 0, 0, 0);
                sc[e][nt] = col2v[nt] ? __ldg(reinterpret_cast<const float4*>(xb + uo + nt * 64))
                                      : make_float4(0, 0, 0, 0);
              }
            }
            const int u0 = 4 * st + 2 * jp;
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
              int dd[2][NT][4];  // [unit of the pair][nt][elem]
#pragma unroll
              for (int e = 0; e < 2; ++e) {
                uint32_t af[4];
                AFrag<T>(r, mt, 2 * jp + e, st, misb, af);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                  int dh[4], dl[4];
                  Mma0<kU8>(dh, af, fr[e][nt].x, fr[e][nt].y);
                  Mma0<kU8>(dl, af, fr[e][nt].z, fr[e][nt].w);
#pragma unroll
                  for (int i = 0; i < 4; ++i) dd[e][nt][i] = dh[i] * 254 + dl[i];
                }
              }
#pragma unroll
              for (int hr = 0; hr < 2; ++hr) {
                const int rr = 16 * mt + 8 * hr + g;
                float4 cf;
                if constexpr (F::kMin) {
                  cf = reinterpret_cast<const float4*>(tab + rr * kTab)[u0 >> 1];
                } else {
                  const float2 c2 = reinterpret_cast<const float2*>(tab + rr * kTab)[u0 >> 1];
                  cf = make_float4(c2.x, 0.0f, c2.y, 0.0f);
                }
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                  for (int ci = 0; ci < 2; ++ci) {
                    const int i = 2 * hr + ci;
                    const float sa = ci ? sc[0][nt].z : sc[0][nt].x, sb = ci ? sc[1][nt].z : sc[1][nt].x;
                    float p;
                    if constexpr (F::kMin) {
                      const float sua = ci ? sc[0][nt].w : sc[0][nt].y, sub_b = ci ? sc[1][nt].w : sc[1][nt].y;
                      p = PairMin(dd[0][nt][i], dd[1][nt][i], cf.x, cf.y, cf.z, cf.w, sa, sua, sb, sub_b);
                    } else {
                      p = PairNoMin(dd[0][nt][i], dd[1][nt][i], cf.x, cf.z, sa, sb);
                    }
                    if (jp == 0) sub[mt][4 * nt + i] = p;
                    else sub[mt][4 * nt + i] = __fadd_rn(sub[mt][4 * nt + i], p);
                  }
              }
            }
          }
        } else {
          // Q6_K: per unit, the two halves from two MMAs (activations masked to the half's lanes).
          float q2[2][2][4 * NT];  // [mt][unit pair][elem]
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int u = 4 * st + j;
            const int uo = u * kXqUnit;
            uint4 frh0[NT], frh1[NT];
            float4 sc[NT];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
              const uint4 fr = colv[nt] ? XFrag(xa + uo + nt * 512) : make_uint4(0, 0, 0, 0);
              sc[nt] = col2v[nt] ? __ldg(reinterpret_cast<const float4*>(xb + uo + nt * 64)) : make_float4(0, 0, 0, 0);
              // The activations of half h sit in lanes t = 2h, 2h+1: each half's MMA sees only its own.
              frh0[nt] = t < 2 ? fr : make_uint4(0, 0, 0, 0);
              frh1[nt] = t < 2 ? make_uint4(0, 0, 0, 0) : fr;
            }
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
              int dd[2][NT][4];  // [half][nt][elem]
              uint32_t af[4];
              AFrag<T>(r, mt, j, st, misb, af);
#pragma unroll
              for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int hf = 0; hf < 2; ++hf) {
                  const uint4 b = hf ? frh1[nt] : frh0[nt];
                  int dh[4], dl[4];
                  Mma0<kU8>(dh, af, b.x, b.y);
                  Mma0<kU8>(dl, af, b.z, b.w);
#pragma unroll
                  for (int i = 0; i < 4; ++i) dd[hf][nt][i] = dh[i] * 254 + dl[i];
                }
#pragma unroll
              for (int hr = 0; hr < 2; ++hr) {
                const int rr = 16 * mt + 8 * hr + g;
                const float2 cf = reinterpret_cast<const float2*>(tab + rr * kTab)[u];
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                  for (int ci = 0; ci < 2; ++ci) {
                    const int i = 2 * hr + ci;
                    const float sx = ci ? sc[nt].z : sc[nt].x;
                    const float p = PairHalves(dd[0][nt][i], dd[1][nt][i], cf.x, cf.y, sx);
                    const int k = 4 * nt + i;
                    if (j == 0) q2[mt][0][k] = p;
                    else if (j == 1) q2[mt][0][k] = __fadd_rn(q2[mt][0][k], p);
                    else if (j == 2) q2[mt][1][k] = p;
                    else {
                      q2[mt][1][k] = __fadd_rn(q2[mt][1][k], p);
                      sub[mt][k] = __fadd_rn(q2[mt][0][k], q2[mt][1][k]);
                    }
                  }
              }
            }
          }
        }
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int k = 0; k < 4 * NT; ++k) acc[mt][k] = __fadd_rn(acc[mt][k], sub[mt][k]);
      };
      stage(std::integral_constant<int, 0>{}, r0);
      stage(std::integral_constant<int, 1>{}, raw1());
    }
    // Next group.
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) rp[mt][h] += F::kGroup;
    tp += F::kGroup;
    if constexpr (kRing) ioff -= F::kGroup;
    xa += kXg;
    xb += kXg;
  }

  // Output element e of this lane: (row, column, value).
  auto elem = [&](int mt, int k, int64_t* row, int* col) {
    if constexpr (MODE == 1) {
      *row = rw0 + 16 * mt + 8 * k + g;
      *col = 0;
    } else {
      const int nt = k >> 2, i = k & 3;
      *row = rw0 + 16 * mt + g + 8 * (i >> 1);
      *col = 8 * nt + 2 * t + (i & 1);
    }
  };
  auto owner = [&](int col) { return MODE == 1 ? t == 0 : col < n; };
  if (a.ksplit == 1) {
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int k = 0; k < kAcc; ++k) {
        int64_t row;
        int col;
        elem(mt, k, &row, &col);
        if (row < rows && owner(col)) {
          float v = acc[mt][k];
          if (bias) v = __fadd_rn(v, bias[row]);
          Y[col * rows + row] = v;
        }
      }
  } else {
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int k = 0; k < kAcc; ++k) {
      int64_t row;
      int col;
      elem(mt, k, &row, &col);
      if (row < rows && owner(col))
        a.part[(static_cast<int64_t>(ks) * 16 + col) * a.part_rows + row0g + row] = acc[mt][k];
    }
  __threadfence();
  __syncthreads();
  if (tid == 0) last = atomicAdd(&a.counters[bx], 1) == a.ksplit - 1;
  __syncthreads();
  if (last) {
  __threadfence();
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int k = 0; k < kAcc; ++k) {
      int64_t row;
      int col;
      elem(mt, k, &row, &col);
      if (row < rows && owner(col)) {
        const float* p = a.part + static_cast<int64_t>(col) * a.part_rows + row0g + row;
        float v = __ldcg(p);
        for (int k2 = 1; k2 < a.ksplit; ++k2) v = __fadd_rn(v, __ldcg(p + static_cast<int64_t>(k2) * 16 * a.part_rows));
        if (bias) v = __fadd_rn(v, bias[row]);
        Y[col * rows + row] = v;
      }
    }
  if (tid == 0) a.counters[bx] = 0;
  }  // last
  }  // ksplit > 1
  if constexpr (!PERSIST) return;
  item += gridDim.x;
  if (item >= n_items) return;
  }  // work items
}

template <class F>
bool Dispatch(GgmlType t, F&& f) {
  switch (t) {
    case GgmlType::Q4_K: f.template operator()<GgmlType::Q4_K>(); return true;
    case GgmlType::Q5_K: f.template operator()<GgmlType::Q5_K>(); return true;
    case GgmlType::Q6_K: f.template operator()<GgmlType::Q6_K>(); return true;
    case GgmlType::Q8_0: f.template operator()<GgmlType::Q8_0>(); return true;
    default: return false;
  }
}

}  // namespace mv2

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

// Warps per block (row tiles sharing a stage): the most that fit the device
// with two column tiles, so the row blocking (and hence the K-split and the
// summation order) is the same for every column count.
int MmqWarps(GgmlType type) {
  const int limit = GetDeviceInfo().smem_optin - 1024;  // room for the kernel's static shared memory
  int w = 0;
  DispatchMmq(type, [&]<GgmlType T>() {
    for (int c : {4, 2, 1})
      if (w == 0 && SmemBytes<T, 2>(c) <= limit && SmemBytes<T, 1>(c) <= limit) w = c;
  });
  return w;
}

namespace {
// SPECD_CUDA_MMQ=1 / 2 / 3 selects v1 (every type) / v2 / v3 (default).
int InitialMmqKernel() {
  const char* e = std::getenv("SPECD_CUDA_MMQ");
  if (e && (std::strcmp(e, "1") == 0 || std::strcmp(e, "v1") == 0)) return 1;
  if (e && (std::strcmp(e, "2") == 0 || std::strcmp(e, "v2") == 0)) return 2;
  return 3;
}
// SPECD_CUDA_MV3_DEPTH=N forces v3's ring depth (0 or unset: automatic).
int InitialMv3Depth() {
  const char* e = std::getenv("SPECD_CUDA_MV3_DEPTH");
  return e ? std::max(0, std::atoi(e)) : 0;
}
int g_mmq_kernel = InitialMmqKernel();
// SPECD_CUDA_MMQ_BPS=N: the K-split target (blocks per SM), default 8.
int g_mmq_blocks_per_sm = [] {
  const char* e = std::getenv("SPECD_CUDA_MMQ_BPS");
  const int v = e ? std::atoi(e) : 0;
  return v > 0 ? v : 8;
}();
int g_mv3_depth = InitialMv3Depth();
// Q4_K/Q5_K/Q6_K rings filled by quad-cooperative 16-byte copies (default;
// SPECD_CUDA_MV3_COPY16=0: each lane's own 8/4-byte pieces).
bool g_mv3_coop = [] {
  const char* e = std::getenv("SPECD_CUDA_MV3_COPY16");
  return !(e && std::strcmp(e, "0") == 0);
}();
// SPECD_CUDA_MV3_PERSIST=1: persistent v3 blocks (default off).
bool g_mv3_persist = [] {
  const char* e = std::getenv("SPECD_CUDA_MV3_PERSIST");
  return e && std::strcmp(e, "1") == 0;
}();
int g_mmq_generation = 0;
// The L2 prefetch measured slower on the H200 (46.7 vs 39.2 us at n = 1, Q4_K
// 25600x5120): off by default.
// The v3 copies' .L2::128B hint measured faster (Q6_K 5120x25600 n=1 1543 ->
// 1616 GB/s): on by default.
mv2::Opts MakeMv2Opts() {
  mv2::Opts o;
  o.prefetch = 0;
  o.l2hint = 1;
  return o;
}
mv2::Opts g_mv2_opts = MakeMv2Opts();
// v2 (and v3, its ring variant: same blocking, same results) serves Q4_K,
// Q5_K, Q6_K and Q8_0 with K a multiple of 256 (whole groups).
bool UseV2(GgmlType type, int64_t k) {
  return g_mmq_kernel >= 2 && k % 256 == 0 &&
         (type == GgmlType::Q4_K || type == GgmlType::Q5_K || type == GgmlType::Q6_K || type == GgmlType::Q8_0);
}

// ---- v3 ring depth ----
// Per (type, mode): the kernel's static shared memory and, once
// PrepareMatvecKernels has run, the resident blocks per SM at each depth.
int TypeIndex(GgmlType t) {
  return t == GgmlType::Q4_K ? 0 : t == GgmlType::Q5_K ? 1 : t == GgmlType::Q6_K ? 2 : 3;
}
int ModeIndex(int n) { return n == 1 ? 0 : n <= 8 ? 1 : 2; }
struct Mv3Info {
  bool ready = false;
  int static_smem = 0;
  int occ[mv2::kMaxDepth + 1] = {};
  int occ_v2 = 0;  // v2's resident blocks per SM
};
Mv3Info g_mv3_info[4][3][4];  // [type][mode][ring kind - 1 + 2 * persistent]
template <GgmlType T>
int RingKind() {
  return g_mv3_coop && mv2::CoopOk<T>() ? 2 : 1;
}
template <GgmlType T>
const Mv3Info& Info(int n) {
  return g_mv3_info[TypeIndex(T)][ModeIndex(n)][RingKind<T>() - 1 + (g_mv3_persist ? 2 : 0)];
}

template <GgmlType T>
size_t Mv3Smem(int depth) {
  return static_cast<size_t>(depth) * mv2::kWarps * mv2::RingSlot<T>();
}

// The depth v3 runs with for (T, n), or 0 when no depth >= 2 fits a block.
template <GgmlType T>
int Mv3DepthT(int n) {
  const Mv3Info& in = Info<T>(n);
  const int room = GetDeviceInfo().smem_optin - (in.ready ? in.static_smem : 8 * 1024 + 64);
  const int fit = std::min<int>(mv2::kMaxDepth, room / (mv2::kWarps * mv2::RingSlot<T>()));
  if (fit < 2) return 0;
  if (g_mv3_depth > 0 && in.ready) return std::max(2, std::min(g_mv3_depth, fit));
  // Automatic: measured on the H200 (docs/gpu-notes.md, device call 8), the
  // ring pays only for Q6_K (n=1: 1201 -> 1616 GB/s at depth 2 with the L2
  // hint; deeper rings lose); for Q4_K, Q5_K and Q8_0 it loses to v2 at every
  // depth (Q4_K n=1: 1510-1590 vs 1903 GB/s), so they run v2 unless a depth is
  // forced.
  if (T != GgmlType::Q6_K) return 0;
  // Without PrepareMatvecKernels' attributes a launch may take 48 KB of dynamic shared memory.
  if (!in.ready) return 48 * 1024 / (mv2::kWarps * mv2::RingSlot<T>()) >= 2 ? 2 : 0;
  // Where even depth 2 costs occupancy against v2 (small shared memory:
  // sm_86/sm_89), v2 runs instead.
  return in.occ[2] < in.occ_v2 ? 0 : 2;
}
int Mv3Depth(GgmlType type, int n) {
  int d = 0;
  mv2::Dispatch(type, [&]<GgmlType T>() { d = Mv3DepthT<T>(n); });
  return d;
}
}  // namespace

void SetMmqKernel(int version) {
  g_mmq_kernel = version == 1 ? 1 : version == 2 ? 2 : 3;
  ++g_mmq_generation;
}
int GetMmqKernel() { return g_mmq_kernel; }
void SetMmqPrefetch(bool on) {
  g_mv2_opts.prefetch = on ? 1 : 0;
  ++g_mmq_generation;
}
void SetMmqBlocksPerSm(int n) {
  g_mmq_blocks_per_sm = n > 0 ? n : 8;
  ++g_mmq_generation;
}
int GetMmqBlocksPerSm() { return g_mmq_blocks_per_sm; }
void SetMmqDepth(int depth) {
  g_mv3_depth = std::max(0, depth);
  ++g_mmq_generation;
}
int GetMmqDepth(GgmlType type, int n) { return Mv3Depth(type, std::max(1, std::min(n, 16))); }
int GetMmqResidentBlocks(GgmlType type, int n) {
  n = std::max(1, std::min(n, 16));
  int b = 0;
  mv2::Dispatch(type, [&]<GgmlType T>() {
    const Mv3Info& in = Info<T>(n);
    if (!in.ready) return;
    const int d = g_mmq_kernel == 3 ? Mv3DepthT<T>(n) : 0;
    b = d >= 2 ? in.occ[d] : in.occ_v2;
  });
  return b;
}
void SetMmqL2Hint(bool on) {
  g_mv2_opts.l2hint = on ? 1 : 0;
  ++g_mmq_generation;
}
void SetMmqCopy16(bool on) {
  g_mv3_coop = on;
  ++g_mmq_generation;
}
bool GetMmqCopy16() { return g_mv3_coop; }
void SetMmqPersistent(bool on) {
  g_mv3_persist = on;
  ++g_mmq_generation;
}
bool GetMmqPersistent() { return g_mv3_persist; }
int MmqConfigGeneration() { return g_mmq_generation; }

bool MmqSupported(GgmlType type, int64_t rows, int64_t k, size_t row_bytes) {
  if (rows < 1 || k < 32 || k % 32 != 0) return false;
  if (row_bytes != RowBytes(type, k)) return false;
  if (UseV2(type, k)) return true;
  if (MmqWarps(type) == 0) return false;
  const bool kquant = type == GgmlType::Q4_K || type == GgmlType::Q5_K || type == GgmlType::Q6_K;
  if (kquant && k % 256 != 0) return false;
  // Q4_K/Q5_K read their headers and quants with aligned vector loads.
  if ((type == GgmlType::Q4_K || type == GgmlType::Q5_K) && row_bytes % 16 != 0) return false;
  return true;
}

int MmqRowBlocks(GgmlType type, int64_t rows, int64_t k) {
  const int64_t per = UseV2(type, k) ? mv2::kRowsB : 32LL * MmqWarps(type);
  return static_cast<int>((rows + per - 1) / per);
}

int64_t MmqPartRows(GgmlType type, int64_t rows, int64_t k) {
  const int64_t per = UseV2(type, k) ? mv2::kRowsB : 32LL * MmqWarps(type);
  return static_cast<int64_t>(MmqRowBlocks(type, rows, k)) * per;
}

int MmqKSplit(GgmlType type, int row_blocks, int64_t k) {
  const DeviceInfo& d = GetDeviceInfo();
  // K-stages of 256 elements (v2: groups).
  const int64_t stages = (k / 32 + kUnitsPerStage - 1) / kUnitsPerStage;
  // About g_mmq_blocks_per_sm blocks per multiprocessor in total, at least 2
  // stages per block.
  const int64_t target = static_cast<int64_t>(g_mmq_blocks_per_sm) * (d.sm_count > 0 ? d.sm_count : 100);
  int64_t split = (target + row_blocks - 1) / row_blocks;
  split = std::min<int64_t>(split, std::max<int64_t>(1, stages / 2));
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(split, 64)));
}

cudaError_t LaunchMmq(GgmlType type, const MmqMatrix* mats, int n_mats, int64_t k, const void* xq, int n, int ksplit,
                      float* part, int64_t part_rows, int* counters, cudaStream_t s) {
  if (n < 1 || n > 16 || n_mats < 1 || n_mats > kMmqMaxMats) return cudaErrorInvalidValue;
  MmqArgs a{};
  a.n_mats = n_mats;
  a.k = k;
  a.xq = static_cast<const uint8_t*>(xq);
  a.n = n;
  a.ksplit = ksplit;
  a.part_rows = part_rows;
  a.part = part;
  a.counters = counters;
  const bool v2 = UseV2(type, k);
  const int64_t per = v2 ? mv2::kRowsB : 32LL * MmqWarps(type);
  int rb = 0;
  int64_t r0 = 0;
  for (int i = 0; i < n_mats; ++i) {
    a.m[i] = MmqMatArgs{static_cast<const uint8_t*>(mats[i].w), mats[i].row_bytes, mats[i].rows, mats[i].bias,
                        mats[i].y, rb, r0};
    const int nb = static_cast<int>((mats[i].rows + per - 1) / per);
    rb += nb;
    r0 += static_cast<int64_t>(nb) * per;
  }
  if (ksplit > 1 && (!part || !counters || part_rows < r0)) return cudaErrorInvalidValue;
  dim3 grid(rb, ksplit);
  bool ok;
  const int depth = v2 && g_mmq_kernel == 3 ? Mv3Depth(type, n) : 0;
  if (v2 && depth >= 2 && g_mv3_persist) {  // v3, persistent blocks
    mv2::Opts o = g_mv2_opts;
    o.depth = depth;
    o.n_rb = rb;
    ok = mv2::Dispatch(type, [&]<GgmlType T>() {
      const size_t sm = Mv3Smem<T>(depth);
      const Mv3Info& in = Info<T>(n);
      const int per_sm = in.ready && in.occ[depth] > 0 ? in.occ[depth] : 1;
      const int sms = GetDeviceInfo().sm_count > 0 ? GetDeviceInfo().sm_count : 1;
      const dim3 pg(static_cast<unsigned>(std::min<int64_t>(static_cast<int64_t>(rb) * ksplit, per_sm * sms)));
      if (RingKind<T>() == 2) {
        if constexpr (mv2::CoopOk<T>()) {
          if (n == 1) mv2::Mv2Kernel<T, 1, 2, true><<<pg, mv2::kWarps * 32, sm, s>>>(a, o);
          else if (n <= 8) mv2::Mv2Kernel<T, 8, 2, true><<<pg, mv2::kWarps * 32, sm, s>>>(a, o);
          else mv2::Mv2Kernel<T, 16, 2, true><<<pg, mv2::kWarps * 32, sm, s>>>(a, o);
        }
      } else {
        if (n == 1) mv2::Mv2Kernel<T, 1, 1, true><<<pg, mv2::kWarps * 32, sm, s>>>(a, o);
        else if (n <= 8) mv2::Mv2Kernel<T, 8, 1, true><<<pg, mv2::kWarps * 32, sm, s>>>(a, o);
        else mv2::Mv2Kernel<T, 16, 1, true><<<pg, mv2::kWarps * 32, sm, s>>>(a, o);
      }
    });
  } else if (v2 && depth >= 2) {  // v3: the ring variant
    mv2::Opts o = g_mv2_opts;
    o.depth = depth;
    ok = mv2::Dispatch(type, [&]<GgmlType T>() {
      const size_t sm = Mv3Smem<T>(depth);
      if (RingKind<T>() == 2) {
        if constexpr (mv2::CoopOk<T>()) {
          if (n == 1) mv2::Mv2Kernel<T, 1, 2><<<grid, mv2::kWarps * 32, sm, s>>>(a, o);
          else if (n <= 8) mv2::Mv2Kernel<T, 8, 2><<<grid, mv2::kWarps * 32, sm, s>>>(a, o);
          else mv2::Mv2Kernel<T, 16, 2><<<grid, mv2::kWarps * 32, sm, s>>>(a, o);
        }
      } else {
        if (n == 1) mv2::Mv2Kernel<T, 1, 1><<<grid, mv2::kWarps * 32, sm, s>>>(a, o);
        else if (n <= 8) mv2::Mv2Kernel<T, 8, 1><<<grid, mv2::kWarps * 32, sm, s>>>(a, o);
        else mv2::Mv2Kernel<T, 16, 1><<<grid, mv2::kWarps * 32, sm, s>>>(a, o);
      }
    });
  } else if (v2) {
    ok = mv2::Dispatch(type, [&]<GgmlType T>() {
      if (n == 1) mv2::Mv2Kernel<T, 1, 0><<<grid, mv2::kWarps * 32, 0, s>>>(a, g_mv2_opts);
      else if (n <= 8) mv2::Mv2Kernel<T, 8, 0><<<grid, mv2::kWarps * 32, 0, s>>>(a, g_mv2_opts);
      else mv2::Mv2Kernel<T, 16, 0><<<grid, mv2::kWarps * 32, 0, s>>>(a, g_mv2_opts);
    });
  } else {
    const int warps = MmqWarps(type);
    ok = DispatchMmq(type, [&]<GgmlType T>() {
      if (n <= 8) MmqKernel<T, 1><<<grid, warps * 32, SmemBytes<T, 1>(warps), s>>>(a);
      else MmqKernel<T, 2><<<grid, warps * 32, SmemBytes<T, 2>(warps), s>>>(a);
    });
  }
  if (!ok) return cudaErrorInvalidValue;
  return LaunchResult();
}

cudaError_t PrepareMatvecKernels() {
  cudaError_t err = cudaSuccess;
  const int limit = GetDeviceInfo().smem_optin;
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q4_K,
                     GgmlType::Q5_K, GgmlType::Q6_K}) {
    DispatchMmq(t, [&]<GgmlType T>() {
      // Dynamic + static shared memory must fit the opt-in limit.
      auto raise = [&](const void* fn) {
        cudaFuncAttributes fa{};
        cudaError_t e = cudaFuncGetAttributes(&fa, fn);
        if (e == cudaSuccess)
          e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   limit - static_cast<int>(fa.sharedSizeBytes));
        if (e != cudaSuccess && err == cudaSuccess) err = e;
      };
      raise(reinterpret_cast<const void*>(MmqKernel<T, 1>));
      raise(reinterpret_cast<const void*>(MmqKernel<T, 2>));
    });
  }
  // v3: allow the ring's dynamic shared memory, prefer shared memory over L1,
  // and record the resident blocks per SM at each depth (Mv3DepthT).
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K, GgmlType::Q8_0}) {
    mv2::Dispatch(t, [&]<GgmlType T>() {
      auto prep = [&](const void* fn, const void* fn_v2, int mode, int kind) {
        Mv3Info& in = g_mv3_info[TypeIndex(T)][mode][kind - 1];  // kind 3/4: persistent 1/2
        cudaFuncAttributes fa{};
        cudaError_t e = cudaFuncGetAttributes(&fa, fn);
        if (e == cudaSuccess)
          e = cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   limit - static_cast<int>(fa.sharedSizeBytes));
        if (e == cudaSuccess)
          e = cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout,
                                   cudaSharedmemCarveoutMaxShared);
        if (e == cudaSuccess) {
          in.static_smem = static_cast<int>(fa.sharedSizeBytes);
          for (int d = 2; d <= mv2::kMaxDepth && e == cudaSuccess; ++d) {
            in.occ[d] = 0;
            if (in.static_smem + static_cast<int>(Mv3Smem<T>(d)) > limit) continue;
            e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&in.occ[d], fn, mv2::kWarps * 32, Mv3Smem<T>(d));
          }
          if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&in.occ_v2, fn_v2, mv2::kWarps * 32, 0);
          in.ready = e == cudaSuccess;
        }
        if (e != cudaSuccess && err == cudaSuccess) err = e;
      };
      auto fn = [](auto k) { return reinterpret_cast<const void*>(k); };
      prep(fn(mv2::Mv2Kernel<T, 1, 1>), fn(mv2::Mv2Kernel<T, 1, 0>), 0, 1);
      prep(fn(mv2::Mv2Kernel<T, 8, 1>), fn(mv2::Mv2Kernel<T, 8, 0>), 1, 1);
      prep(fn(mv2::Mv2Kernel<T, 16, 1>), fn(mv2::Mv2Kernel<T, 16, 0>), 2, 1);
      prep(fn(mv2::Mv2Kernel<T, 1, 1, true>), fn(mv2::Mv2Kernel<T, 1, 0>), 0, 3);
      prep(fn(mv2::Mv2Kernel<T, 8, 1, true>), fn(mv2::Mv2Kernel<T, 8, 0>), 1, 3);
      prep(fn(mv2::Mv2Kernel<T, 16, 1, true>), fn(mv2::Mv2Kernel<T, 16, 0>), 2, 3);
      if constexpr (mv2::CoopOk<T>()) {
        prep(fn(mv2::Mv2Kernel<T, 1, 2>), fn(mv2::Mv2Kernel<T, 1, 0>), 0, 2);
        prep(fn(mv2::Mv2Kernel<T, 8, 2>), fn(mv2::Mv2Kernel<T, 8, 0>), 1, 2);
        prep(fn(mv2::Mv2Kernel<T, 16, 2>), fn(mv2::Mv2Kernel<T, 16, 0>), 2, 2);
        prep(fn(mv2::Mv2Kernel<T, 1, 2, true>), fn(mv2::Mv2Kernel<T, 1, 0>), 0, 4);
        prep(fn(mv2::Mv2Kernel<T, 8, 2, true>), fn(mv2::Mv2Kernel<T, 8, 0>), 1, 4);
        prep(fn(mv2::Mv2Kernel<T, 16, 2, true>), fn(mv2::Mv2Kernel<T, 16, 0>), 2, 4);
      }
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
