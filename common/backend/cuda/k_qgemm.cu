// Prompt products on the packed k-quant tiles: y = W x for prefill chunks
// (more columns than the matvecs take), without materialising F16 weights.
//
// The dequantize-then-cuBLAS path wrote every weight to an F16 slab and read
// it back: ~3.5x the weights' bytes per forward whatever its token count,
// 35 of a 128-token prefill's ~60 ms on the 27B-class target (round 13's
// ncu; docs/PERFORMANCE.md). Here a block stages its tiles' records and the
// columns' F16 activations of one 256-element group in shared memory
// (cp.async, two stages), each warp expands its two tiles' codes to F16 in
// registers with the unit scale and d folded in (d * sc rounded to F16, times
// the exact integer code: two roundings where the slab's F16 weight has one), and
// multiplies them with mma.sync m16n8k16 in FP32 against eight column tiles.
// The k-quants' mins enter as one more m16n8k16 per group over the units
// (A: -dmin * m per row and unit, B: the columns' unit sums of the F16
// activations). Results are F16-weight / F16-activation / FP32-sum products
// like cuBLAS's on the slab (not the matvecs' integers: prompts need not
// reproduce a decode's bits).
//
// Fragment order: the records hold int8 m16n8k32 A fragments (lane t of a
// row has the unit's elements 4t..4t+3 and 16+4t..16+4t+3). An F16
// m16n8k16's lane holds slots 2t, 2t+1, 2t+8, 2t+9 of its rows (A) and
// column (B); any bijection of k works when A and B agree, so slots (2t,
// 2t+1, 2t+8, 2t+9) of the first MMA are elements 4t..4t+3, of the second
// 16+4t..16+4t+3, and a lane's B fragment is 8 contiguous bytes of its
// column.
//
// Split-K: a matrix of few row blocks (the down and output projections)
// splits its groups into parts over grid z, each part's sums written to a
// scratch and added in part order by QGemmReduceKernel (deterministic).
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "common/backend/cuda/k_common.cuh"
#include "common/backend/cuda/k_mmv_record.cuh"
#include "common/backend/cuda/kernels.h"
#include "common/quant/mmv_tiles.h"

namespace specd::cuda {
namespace {

constexpr int kQgWarps = 4;                   // a warp: two 16-row tiles x 64 columns
constexpr int kQgTiles = 2 * kQgWarps;        // tiles a block (128 rows)
constexpr int kQgCols = 64;                   // columns a block
constexpr int kQgColBytes = 544;              // a column's stage: 512 bytes of x, 16 of unit sums, pad
constexpr int kQgSumOff = 512;
// 544 = 17 x 32: a half-warp's 8-byte B loads (4 columns x 4 lanes) hit 32
// distinct banks.

template <GgmlType T>
constexpr size_t QgStageBytes() {
  return static_cast<size_t>(kQgTiles) * mmv::LayoutOf(T).rec + static_cast<size_t>(kQgCols) * kQgColBytes;
}
template <GgmlType T>
constexpr size_t QgSmem() {
  return 2 * QgStageBytes<T>();
}

__device__ __forceinline__ uint32_t HMul2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
__device__ __forceinline__ uint32_t Pack2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ void MmaF16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// The offset the type subtracts from its stored codes (StoredCodes).
template <GgmlType T>
constexpr int CodeOffset() {
  return T == GgmlType::Q6_K ? 32 : 0;
}

// Two stored codes (bytes 0, 1 of r; hi: 2, 3) less the offset, exact in
// F16, times the F16 unit factor f (one rounding).
template <GgmlType T>
__device__ __forceinline__ uint32_t Expand(uint32_t r, bool hi, uint32_t f) {
  return HMul2(BytesToHalf2(r, hi, (0x6400u + CodeOffset<T>()) * 0x10001u), f);
}

template <GgmlType T>
__global__ void __launch_bounds__(32 * kQgWarps, 2)
    QGemmKernel(const uint8_t* __restrict__ w, int64_t tiles, int64_t groups, int64_t gpp, int64_t rows,
                const __half* __restrict__ x, const __half* __restrict__ xsum, int n, int64_t k, float* __restrict__ y,
                int64_t ldy) {
  constexpr Layout l = mmv::LayoutOf(T);
  constexpr int kRec = l.rec;
  constexpr bool kMins = T != GgmlType::Q6_K;
  extern __shared__ uint4 qg_smem[];
  uint8_t* sm = reinterpret_cast<uint8_t*>(qg_smem);
  const uint32_t sm_s = static_cast<uint32_t>(__cvta_generic_to_shared(sm));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int c0 = blockIdx.x * kQgCols;
  const int64_t tile0 = static_cast<int64_t>(blockIdx.y) * kQgTiles;
  const int64_t gb = static_cast<int64_t>(blockIdx.z) * gpp, ng = min(groups, gb + gpp) - gb;
  const int64_t units = k / 32;
  auto stage = [&](int64_t i) { return sm + (i & 1) * QgStageBytes<T>(); };
  // Copies walk pointers (round 31's lesson: per-piece index arithmetic was
  // a tenth of the wide matvec's instructions). A warp copies its own two
  // tiles' records and 16 of the block's columns: lane L the 16 bytes at
  // 16 L of each column's 512 (and lanes 0-15 a column's unit sums).
  const uint8_t* wsrc[2];
#pragma unroll
  for (int rt = 0; rt < 2; ++rt) {
    const int64_t tl = tile0 + 2 * warp + rt;
    wsrc[rt] = tl < tiles ? w + (tl * groups + gb) * kRec + 16 * lane : nullptr;
  }
  const int xcol0 = 16 * warp;
  const int xcols = max(0, min(16, n - c0 - xcol0));  // this warp's columns that exist
  const __half* xsrc = x + static_cast<int64_t>(c0 + xcol0) * k + gb * 256 + 8 * lane;
  const __half* ssrc = xsum + static_cast<int64_t>(c0 + xcol0 + (lane & 15)) * units + gb * 8;
  auto cp16 = [](uint32_t dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
  };
  auto copy = [&](int64_t i) {
    if (i >= ng) return;
    const uint32_t ws = sm_s + static_cast<uint32_t>((i & 1) * QgStageBytes<T>());
    constexpr int kRecChunks = kRec / 16;
#pragma unroll
    for (int rt = 0; rt < 2; ++rt) {
      if (!wsrc[rt]) continue;
      const uint32_t d = ws + (2 * warp + rt) * kRec + 16 * lane;
#pragma unroll
      for (int j = 0; j < (kRecChunks + 31) / 32; ++j)
        if (kRecChunks % 32 == 0 || lane + 32 * j < kRecChunks) cp16(d + 512 * j, wsrc[rt] + 512 * j);
      wsrc[rt] += kRec;
    }
    // Columns past n are left as they are: they reach only their own (unstored) outputs.
    const uint32_t xd = ws + kQgTiles * kRec + xcol0 * kQgColBytes;
    for (int cc = 0; cc < xcols; ++cc) cp16(xd + cc * kQgColBytes + 16 * lane, xsrc + cc * k);
    if (lane < xcols) cp16(xd + lane * kQgColBytes + kQgSumOff, ssrc);
    xsrc += 256;
    ssrc += 8;
  };
  copy(0);
  CpAsyncCommit();
  float acc[2][8][4];
#pragma unroll
  for (int rt = 0; rt < 2; ++rt)
#pragma unroll
    for (int ct = 0; ct < 8; ++ct)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[rt][ct][i] = 0.0f;
  for (int64_t i = 0; i < ng; ++i) {
    CpAsyncWait<0>();
    __syncthreads();  // stage i landed for everyone; stage i - 1 is free
    copy(i + 1);
    CpAsyncCommit();
    const uint8_t* ws = stage(i);
    const uint8_t* xs = ws + kQgTiles * kRec;
    const uint8_t* xl = xs + g * kQgColBytes + 8 * t;  // the lane's column g, elements 4t..
    // Per row tile: the rows' scales as F16 unit factors d * sc (32-element
    // units: one per unit; 16-element units: two) and, with mins, the mins'
    // A fragment.
    WRegs wr[2];
    // [tile][row h][word]: F16 factors d * sc of units (or 16-element
    // sub-units) 2q, 2q + 1 in word q.
    constexpr int kFw = l.unit16 ? 8 : 4;
    uint32_t fa[2][2][kFw];
    uint32_t ma[2][4] = {};
#pragma unroll
    for (int rt = 0; rt < 2; ++rt) {
      const uint8_t* rec = ws + (2 * warp + rt) * kRec;
      LoadW<T, false>(rec, lane, wr[rt]);
      KScales s;
      DecodeK<T>(wr[rt], s);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float d = s.d[h] * CodeScale<T>();  // (DecodeK divides Q6_K's d by its code scale)
#pragma unroll
        for (int q = 0; q < kFw; ++q)
          fa[rt][h][q] = Pack2(d * static_cast<float>(KUnitScale<T>(s, h, 2 * q)),
                               d * static_cast<float>(KUnitScale<T>(s, h, 2 * q + 1)));
      }
      if constexpr (kMins) {
        // Lane t < 2 holds units 4t .. 4t + 3: slots (2t, 2t + 1) units 4t, 4t + 1, slots (2t + 8, 2t + 9)
        // units 4t + 2, 4t + 3; rows g (a0, a2) and g + 8 (a1, a3).
        if (t < 2) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const uint32_t mw = t == 0 ? s.mn[h][0] : s.mn[h][1];  // (no local-memory index)
            const float off = s.off[h];  // -dmin
            ma[rt][h] = Pack2(off * static_cast<float>(mw & 0xFF), off * static_cast<float>((mw >> 8) & 0xFF));
            ma[rt][2 + h] = Pack2(off * static_cast<float>((mw >> 16) & 0xFF), off * static_cast<float>(mw >> 24));
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      uint32_t a[2][8];
#pragma unroll
      for (int rt = 0; rt < 2; ++rt) {
        const uint8_t* rec = ws + (2 * warp + rt) * kRec;
        if constexpr (l.p4 >= 0)
          if ((u & 1) == 0) wr[rt].p4[u >> 1] = LdS(rec + l.p4 + 512 * (u >> 1) + 16 * lane);
        if constexpr (l.p2 >= 0)
          if ((u & 3) == 0) wr[rt].p2[u >> 2] = LdS(rec + l.p2 + 512 * (u >> 2) + 16 * lane);
        if constexpr (l.p1 >= 0)
          if (u == 0) wr[rt].p1 = LdS(rec + l.p1 + 16 * lane);
        // The unit's factor of row g (h = 0) and g + 8, as (f, f); 16-element
        // units: the first MMA's sub-unit 2u, the second's 2u + 1.
        uint32_t f[2][2];
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int m = 0; m < 2; ++m) {
            const int v = l.unit16 ? 2 * u + m : u;
            const uint32_t wd = fa[rt][h][v >> 1];
            f[h][m] = __byte_perm(wd, wd, (v & 1) ? 0x3232u : 0x1010u);
          }
        const uint32_t r0 = StoredCodes<T>(wr[rt], u, 0), r1 = StoredCodes<T>(wr[rt], u, 1);
        const uint32_t r2 = StoredCodes<T>(wr[rt], u, 2), r3 = StoredCodes<T>(wr[rt], u, 3);
        // First MMA (elements 4t..4t+3): a0 row g slots 2t.., a1 row g+8, a2 row g slots 2t+8.., a3 row g+8.
        a[rt][0] = Expand<T>(r0, false, f[0][0]);
        a[rt][1] = Expand<T>(r1, false, f[1][0]);
        a[rt][2] = Expand<T>(r0, true, f[0][0]);
        a[rt][3] = Expand<T>(r1, true, f[1][0]);
        // Second MMA (elements 16+4t..).
        a[rt][4] = Expand<T>(r2, false, f[0][1]);
        a[rt][5] = Expand<T>(r3, false, f[1][1]);
        a[rt][6] = Expand<T>(r2, true, f[0][1]);
        a[rt][7] = Expand<T>(r3, true, f[1][1]);
      }
      // The unit's two MMAs a column tile and tile accumulate into one
      // fragment: all first MMAs, then all second ones (16 between each
      // dependent pair).
#pragma unroll
      for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int ct = 0; ct < 8; ++ct) {
          const uint2 b = *reinterpret_cast<const uint2*>(xl + ct * 8 * kQgColBytes + 64 * u + 32 * m);
#pragma unroll
          for (int rt = 0; rt < 2; ++rt)
            MmaF16(acc[rt][ct], a[rt][4 * m], a[rt][4 * m + 1], a[rt][4 * m + 2], a[rt][4 * m + 3], b.x, b.y);
        }
    }
    if constexpr (kMins) {
#pragma unroll
      for (int ct = 0; ct < 8; ++ct) {
        uint2 b = make_uint2(0u, 0u);
        if (t < 2) b = *reinterpret_cast<const uint2*>(xs + (ct * 8 + g) * kQgColBytes + kQgSumOff + 8 * t);
#pragma unroll
        for (int rt = 0; rt < 2; ++rt) MmaF16(acc[rt][ct], ma[rt][0], ma[rt][1], ma[rt][2], ma[rt][3], b.x, b.y);
      }
    }
  }
  // Outputs: element i of (tile, column tile) is row g + 8 (i >> 1), column 2t + (i & 1).
  float* out = y + static_cast<size_t>(blockIdx.z) * static_cast<size_t>(n) * static_cast<size_t>(ldy);
#pragma unroll
  for (int rt = 0; rt < 2; ++rt) {
    const int64_t r0 = (tile0 + 2 * warp + rt) * mmv::kTileRows + g;
#pragma unroll
    for (int ct = 0; ct < 8; ++ct)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t r = r0 + 8 * (i >> 1);
        const int c = c0 + 8 * ct + 2 * t + (i & 1);
        if (r < rows && c < n) out[static_cast<int64_t>(c) * ldy + r] = acc[rt][ct][i];
      }
  }
}

// y[c][r] = sum over parts p (in order) of part[p][c][r].
__global__ void QGemmReduceKernel(const float* __restrict__ part, int parts, int n, int64_t rows, float* __restrict__ y,
                                  int64_t ldy) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<int64_t>(n) * rows) return;
  const int64_t c = i / rows, r = i - c * rows;
  float s = part[i];
  for (int p = 1; p < parts; ++p) s += part[static_cast<size_t>(p) * n * rows + i];
  y[c * ldy + r] = s;
}

__global__ void UnitSumsKernel(const __half* __restrict__ x, int64_t count32, __half* __restrict__ sums) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count32) return;
  const uint4* p = reinterpret_cast<const uint4*>(x + 32 * i);
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint4 v = p[j];
    const uint32_t ws[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&ws[q]));
      s += f.x + f.y;
    }
  }
  sums[i] = __float2half_rn(s);
}

template <class F>
bool DispatchQg(GgmlType type, F&& f) {
  switch (type) {
    case GgmlType::Q4_K: f.template operator()<GgmlType::Q4_K>(); return true;
    case GgmlType::Q5_K: f.template operator()<GgmlType::Q5_K>(); return true;
    case GgmlType::Q6_K: f.template operator()<GgmlType::Q6_K>(); return true;
    default: return false;
  }
}

}  // namespace

bool QGemmSupported(GgmlType type, int64_t k) {
  return k % 256 == 0 && DispatchQg(type, []<GgmlType>() {});  // the types DispatchQg launches
}

QGemmShape QGemmPlan(GgmlType type, int64_t rows, int64_t k, int n) {
  QGemmShape p;
  p.row_blocks = CeilDiv(mmv::Tiles(rows), kQgTiles);
  p.col_blocks = CeilDiv(n, kQgCols);
  const int64_t groups = mmv::Groups(k);
  const int per_sm = type == GgmlType::Q6_K ? 1 : 2;  // two stages' shared memory
  const double slots = static_cast<double>(GetDeviceInfo().sm_count) * per_sm;
  const double blocks = static_cast<double>(p.row_blocks) * p.col_blocks;
  // Parts over the groups so that the launch's waves (each as long as its
  // parts' groups plus a fixed cost of ~2 groups) cost least.
  double best = 0;
  for (int parts = 1; parts <= 8; ++parts) {
    const int64_t gpp = (groups + parts - 1) / parts;
    if (parts > 1 && (parts - 1) * gpp >= groups) break;  // a part would be empty
    const double cost = std::ceil(blocks * parts / slots) * (static_cast<double>(gpp) + 2.0);
    if (best == 0 || cost < best) {
      best = cost;
      p.parts = parts;
      p.gpp = gpp;
    }
  }
  return p;
}

size_t QGemmPartBytes(const QGemmShape& p, int64_t rows, int n) {
  return p.parts > 1 ? static_cast<size_t>(p.parts) * static_cast<size_t>(n) * static_cast<size_t>(rows) * 4 : 0;
}

cudaError_t LaunchUnitSums(const void* x16, int64_t count, void* sums, cudaStream_t s) {
  const int64_t n32 = count / 32;
  if (n32 <= 0) return cudaSuccess;
  UnitSumsKernel<<<CeilDiv(n32, 256), 256, 0, s>>>(static_cast<const __half*>(x16), n32, static_cast<__half*>(sums));
  return LaunchResult();
}

cudaError_t LaunchQGemm(GgmlType type, const void* packed, int64_t rows, int64_t k, const void* x16,
                        const void* xsum, int n, float* y, int64_t ldy, float* part, size_t part_cap,
                        cudaStream_t s) {
  if (n < 1 || rows < 1) return cudaSuccess;
  if (!QGemmSupported(type, k)) return cudaErrorInvalidValue;
  const QGemmShape p = QGemmPlan(type, rows, k, n);
  if (QGemmPartBytes(p, rows, n) > part_cap) return cudaErrorInvalidValue;
  cudaError_t err = cudaErrorInvalidValue;
  const bool ok = DispatchQg(type, [&]<GgmlType T>() {
    static bool attr = false;  // the opt-in above 48 KiB, once per type
    if (!attr) {
      err = cudaFuncSetAttribute(QGemmKernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 static_cast<int>(QgSmem<T>()));
      if (err != cudaSuccess) return;
      attr = true;
    }
    const dim3 grid(static_cast<unsigned>(p.col_blocks), static_cast<unsigned>(p.row_blocks),
                    static_cast<unsigned>(p.parts));
    QGemmKernel<T><<<grid, 32 * kQgWarps, QgSmem<T>(), s>>>(
        static_cast<const uint8_t*>(packed), mmv::Tiles(rows), mmv::Groups(k), p.gpp, rows,
        static_cast<const __half*>(x16), static_cast<const __half*>(xsum), n, k, p.parts > 1 ? part : y,
        p.parts > 1 ? rows : ldy);
    err = LaunchResult();
  });
  if (!ok || err != cudaSuccess) return ok ? err : cudaErrorInvalidValue;
  if (p.parts == 1) return cudaSuccess;
  const int64_t count = static_cast<int64_t>(n) * rows;
  QGemmReduceKernel<<<CeilDiv(count, 256), 256, 0, s>>>(part, p.parts, n, rows, y, ldy);
  return LaunchResult();
}

}  // namespace specd::cuda
