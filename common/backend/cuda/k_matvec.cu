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

bool MmqSupported(GgmlType type, int64_t rows, int64_t k, size_t row_bytes) {
  if (MmqWarps(type) == 0 || rows < 1 || k < 32 || k % 32 != 0) return false;
  const bool kquant = type == GgmlType::Q4_K || type == GgmlType::Q5_K || type == GgmlType::Q6_K;
  if (kquant && k % 256 != 0) return false;
  if (row_bytes != RowBytes(type, k)) return false;
  // Q4_K/Q5_K read their headers and quants with aligned vector loads.
  if ((type == GgmlType::Q4_K || type == GgmlType::Q5_K) && row_bytes % 16 != 0) return false;
  return true;
}

int MmqRowBlocks(GgmlType type, int64_t rows) {
  const int64_t per = 32LL * MmqWarps(type);
  return static_cast<int>((rows + per - 1) / per);
}

int64_t MmqPartRows(GgmlType type, int64_t rows) { return static_cast<int64_t>(MmqRowBlocks(type, rows)) * 32 * MmqWarps(type); }

namespace {
int g_mmq_blocks_per_sm = 8;
}  // namespace
void SetMmqBlocksPerSm(int n) { g_mmq_blocks_per_sm = n > 0 ? n : 8; }
int GetMmqBlocksPerSm() { return g_mmq_blocks_per_sm; }

int MmqKSplit(GgmlType type, int row_blocks, int64_t k) {
  const DeviceInfo& d = GetDeviceInfo();
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
  const int warps = MmqWarps(type);
  int rb = 0;
  int64_t r0 = 0;
  for (int i = 0; i < n_mats; ++i) {
    a.m[i] = MmqMatArgs{static_cast<const uint8_t*>(mats[i].w), mats[i].row_bytes, mats[i].rows, mats[i].bias,
                        mats[i].y, rb, r0};
    rb += MmqRowBlocks(type, mats[i].rows);
    r0 += static_cast<int64_t>(MmqRowBlocks(type, mats[i].rows)) * 32 * warps;
  }
  if (ksplit > 1 && (!part || !counters || part_rows < r0)) return cudaErrorInvalidValue;
  const bool ok = DispatchMmq(type, [&]<GgmlType T>() {
    dim3 grid(rb, ksplit);
    if (n <= 8) MmqKernel<T, 1><<<grid, warps * 32, SmemBytes<T, 1>(warps), s>>>(a);
    else MmqKernel<T, 2><<<grid, warps * 32, SmemBytes<T, 2>(warps), s>>>(a);
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
