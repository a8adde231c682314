// Decode / verify matrix-vector products, y = W x for 1..16 columns, the
// weight matrix streamed from memory once for all of them.
//
// Quantized weights live in the mmv tile layout (common/quant/mmv_tiles.h:
// packed once at load by PackKernel, losslessly, in the GGUF byte count):
// a (16-row tile, 256-element group) is one contiguous record. A block owns
// one tile; its warps split the tile's groups (MmvPlan: the split that makes
// the launch's waves cheapest, from the shapes and the device only), and the
// warps' sums are added in warp order. Each warp streams its records through
// a ring of MmvStages shared-memory slots with cp.async, so the next groups
// are in flight per warp while registers hold only the current one (ncu,
// round 10: with the next group prefetched in registers the kernel took 125
// registers, ~20% occupancy and 39-51% of DRAM bandwidth). Per group and unit
// the codes meet the activations (two int8 levels, LaunchQuantizeX) in
// mma.sync m16n8k32 / m16n8k16 (up to 4 columns both levels share one MMA:
// kPaired); the k-quants' integer scales are applied in int32 and their mins
// through an MMA over the units' limb sums, all exact, then one float
// expression per group (mmv::KGroupValue). The arithmetic is mmv::Emulate's,
// so tests compare the device with it bit for bit.
//
// The first records are requested before griddepcontrol.wait: with
// programmatic dependent launch they stream in while the producer of the
// activations finishes.
//
// Float weights (F16 BF16 F32) use a plain FP32 FMA kernel.
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/backend/cuda/k_common.cuh"
#include "common/backend/cuda/k_mmv_record.cuh"
#include "common/quant/mmv_tiles.h"

namespace specd::cuda {
namespace {

using mmv::Layout;

// Activations: read by every block, cached (kSh: staged in shared memory by
// the wide kernel).
template <bool kSh = false, class V = uint4>
__device__ __forceinline__ V LdX(const uint8_t* p) {
  if constexpr (kSh) return *reinterpret_cast<const V*>(p);
  else return __ldg(reinterpret_cast<const V*>(p));
}

// ---- integer MMA, D = A * B (no accumulator) or D += A * B ----
template <bool kS8>
__device__ __forceinline__ void Mma32(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kS8) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
  } else {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
  }
}
template <bool kS8>
__device__ __forceinline__ void Mma16(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  if constexpr (kS8) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a0), "r"(a1), "r"(b0), "r"(0));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};\n"
        : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
        : "r"(a0), "r"(a1), "r"(b0), "r"(0));
  }
}
__device__ __forceinline__ void Mma16Acc(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(b0));
}


// Column modes. C >= 1: C tiles of 8 columns, each column's two activation
// levels (hi, lo) in two MMAs per unit. C = 0 (paired, up to 4 columns, the
// decode and short verifies): MMA column 2c is column c's hi level and 2c + 1
// its lo level, so one MMA per unit gives both and the lane's D fragment holds
// (hi, lo) of column t for rows g and g + 8: half the MMAs and half the
// scale multiply-adds of a tile, for the same integers (so the same floats).
constexpr int kPaired = 0;
constexpr int Tiles(int C) { return C == kPaired ? 1 : C; }

// The lane's view of the activation record of one group: where its B
// fragments are, and which of its columns exist (zero fragments otherwise).
template <int C>
struct XView {
  const uint8_t* rec[Tiles(C)];
  int frag;                  // the lane's fragment bytes within a unit's 512
  int lanex;                 // the lane whose (16-byte) fragment position it reads
  bool col_ok[Tiles(C)];     // the lane's B column exists
  bool out_ok[Tiles(C)];     // the lane's first output column exists
};

// Output element i of column tile ct held by lane t: its column, or -1.
template <int C>
__device__ __forceinline__ int OutCol(int ct, int t, int i) {
  if constexpr (C == kPaired) return (i & 1) ? -1 : t;
  return 8 * ct + 2 * t + (i & 1);
}

// The unit's B fragment (hi b0, hi b1, lo b0, lo b1); paired: (b0, b1) of the
// level of MMA column g in .x, .y.
template <int C, bool kSh>
__device__ __forceinline__ uint4 FragB(const XView<C>& x, int ct, int u) {
  if (!x.col_ok[ct]) return make_uint4(0, 0, 0, 0);
  const uint8_t* f = x.rec[ct] + mmv::xq::kFrag + 512 * u + x.frag;
  if constexpr (C == kPaired) {
    const uint2 v = LdX<kSh, uint2>(f);
    return make_uint4(v.x, v.y, 0, 0);
  }
  return LdX<kSh>(f);
}

// Adds one unit's products to the high- and low-limb sums: fragment rows g
// (elements 0, 1) take the first half's scale s0, rows g + 8 (2, 3) s1.
__device__ __forceinline__ void AddScaled(int (&hi)[4], int (&lo)[4], int s0, int s1, const int (&dh)[4],
                                          const int (&dl)[4]) {
  hi[0] += s0 * dh[0];
  hi[1] += s0 * dh[1];
  hi[2] += s1 * dh[2];
  hi[3] += s1 * dh[3];
  lo[0] += s0 * dl[0];
  lo[1] += s0 * dl[1];
  lo[2] += s1 * dl[2];
  lo[3] += s1 * dl[3];
}
// Paired: d = (hi, lo) of row g, then of row g + 8; the sums live in
// elements 0 and 2.
__device__ __forceinline__ void AddScaledPaired(int (&hi)[4], int (&lo)[4], int s0, int s1, const int (&d)[4]) {
  hi[0] += s0 * d[0];
  lo[0] += s0 * d[1];
  hi[2] += s1 * d[2];
  lo[2] += s1 * d[3];
}

// One unit's codes a times one column tile's two activation levels b (hi b0,
// hi b1, lo b0, lo b1), scaled and added to the limb sums (8-column tiles;
// GroupK's and GroupKWide's, so the wide kernel's integers are the per-tile
// kernels').
template <GgmlType T>
__device__ __forceinline__ void KUnit(const uint32_t (&a)[4], const uint4& b, const KScales& s, int u, int (&hi)[4],
                                      int (&lo)[4]) {
  constexpr bool kS8 = SignedA<T>();
  if constexpr (!mmv::LayoutOf(T).unit16) {
    const int s0 = KUnitScale<T>(s, 0, u), s1 = KUnitScale<T>(s, 1, u);
    int dh[4], dl[4];
    Mma32<kS8>(dh, a, b.x, b.y);
    Mma32<kS8>(dl, a, b.z, b.w);
    AddScaled(hi, lo, s0, s1, dh, dl);
  } else {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int v = 2 * u + hh;
      const int s0 = KUnitScale<T>(s, 0, v), s1 = KUnitScale<T>(s, 1, v);
      int dh[4], dl[4];
      Mma16<kS8>(dh, a[2 * hh], a[2 * hh + 1], hh ? b.y : b.x);
      Mma16<kS8>(dl, a[2 * hh], a[2 * hh + 1], hh ? b.w : b.z);
      AddScaled(hi, lo, s0, s1, dh, dl);
    }
  }
}
// The mins' term, sum over units of min x unit sum: a m16n8k16 over the
// units (k = unit), the mins the A fragment (KMinFrags), the unit sums as
// three 7-bit limbs lb (x, y, z) the B fragment, exact in int32 (paired: MMA
// columns 2c and 2c + 1 both read column c's sums).
template <GgmlType T>
__device__ __forceinline__ void KMinFrags(const KScales& s, int t, uint32_t& ma0, uint32_t& ma1) {
  if constexpr (!mmv::LayoutOf(T).unit16) {
    ma0 = t == 0 ? s.mn[0][0] : t == 1 ? s.mn[0][1] : 0u;
    ma1 = t == 0 ? s.mn[1][0] : t == 1 ? s.mn[1][1] : 0u;
  } else {
    ma0 = s.mn[0][t];
    ma1 = s.mn[1][t];
  }
}
__device__ __forceinline__ void KMins(uint32_t ma0, uint32_t ma1, const uint4& lb, int (&m)[4]) {
  Mma16<true>(m, ma0, ma1, lb.z);
#pragma unroll
  for (int i = 0; i < 4; ++i) m[i] *= 128;
  Mma16Acc(m, ma0, ma1, lb.y);
#pragma unroll
  for (int i = 0; i < 4; ++i) m[i] *= 128;
  Mma16Acc(m, ma0, ma1, lb.x);
}

template <GgmlType T, int C>
__device__ __forceinline__ void GroupK(const WRegs& w, const XView<C>& x, int lane, float (&acc)[Tiles(C)][4]) {
  constexpr int NT = Tiles(C);
  constexpr Layout l = mmv::LayoutOf(T);
  constexpr bool kS8 = SignedA<T>();
  KScales s;
  DecodeK<T>(w, s);
  int shi[NT][4], slo[NT][4];
#pragma unroll
  for (int ct = 0; ct < NT; ++ct)
#pragma unroll
    for (int i = 0; i < 4; ++i) shi[ct][i] = slo[ct][i] = 0;
#pragma unroll
  for (int u = 0; u < 8; ++u) {
    uint32_t a[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) a[j] = AReg<T>(w, u, j);
#pragma unroll
    for (int ct = 0; ct < NT; ++ct) {
      const uint4 b = FragB<C, false>(x, ct, u);
      if constexpr (C != kPaired) {
        KUnit<T>(a, b, s, u, shi[ct], slo[ct]);
      } else if constexpr (!l.unit16) {
        const int s0 = KUnitScale<T>(s, 0, u), s1 = KUnitScale<T>(s, 1, u);
        int d[4];
        Mma32<kS8>(d, a, b.x, b.y);
        AddScaledPaired(shi[ct], slo[ct], s0, s1, d);
      } else {
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int v = 2 * u + hh;
          const int s0 = KUnitScale<T>(s, 0, v), s1 = KUnitScale<T>(s, 1, v);
          int d[4];
          Mma16<kS8>(d, a[2 * hh], a[2 * hh + 1], hh ? b.y : b.x);
          AddScaledPaired(shi[ct], slo[ct], s0, s1, d);
        }
      }
    }
  }
  const int t = lane & 3;
#pragma unroll
  for (int ct = 0; ct < NT; ++ct) {
    int m[4] = {0, 0, 0, 0};
    if constexpr (mmv::HasMins(T)) {
      uint32_t ma0, ma1;
      KMinFrags<T>(s, t, ma0, ma1);
      const uint4 lb =
          x.col_ok[ct] ? LdX(x.rec[ct] + (l.unit16 ? mmv::xq::kLimb16 : mmv::xq::kLimb32) + 16 * x.lanex)
                       : make_uint4(0, 0, 0, 0);
      KMins(ma0, ma1, lb, m);
    }
    float2 dx = make_float2(0.0f, 0.0f);
    if (x.out_ok[ct]) {
      if constexpr (C == kPaired) dx.x = LdX<false, float>(x.rec[ct] + mmv::xq::kScale + 4 * t);
      else dx = LdX<false, float2>(x.rec[ct] + mmv::xq::kScale + 8 * t);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (C == kPaired && (i & 1)) continue;
      const float v = mmv::KGroupValue(shi[ct][i], slo[ct][i], m[i], s.d[i >> 1], s.off[i >> 1]);
      acc[ct][i] = mmv::Fma((i & 1) ? dx.y : dx.x, v, acc[ct][i]);
    }
  }
}

// Legacy formats: a float scale (and min) per 32-element unit.
template <GgmlType T, int C, bool kSh = false>
__device__ __forceinline__ void GroupLegacy(const WRegs& w, const XView<C>& x, int lane,
                                            float (&acc)[Tiles(C)][4]) {
  constexpr int NT = Tiles(C);
  constexpr bool kS8 = SignedA<T>();
  constexpr bool kMins = mmv::HasMins(T);
  constexpr float kInv = 1.0f / CodeScale<T>();
  const int t = lane & 3;
  float vg[NT][4];
  int4 xs[NT][2][2];  // unit sums of the lane's output columns (formats with mins)
#pragma unroll
  for (int ct = 0; ct < NT; ++ct) {
#pragma unroll
    for (int i = 0; i < 4; ++i) vg[ct][i] = 0.0f;
    if constexpr (kMins) {
#pragma unroll
      for (int c = 0; c < 2; ++c)
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const int col = C == kPaired ? t : 2 * t + c;
          xs[ct][c][q] = x.out_ok[ct] && (C != kPaired || c == 0)
                             ? LdX<kSh, int4>(x.rec[ct] + mmv::xq::kSum32 + 4 * (8 * col + 4 * q))
                             : make_int4(0, 0, 0, 0);
        }
    }
  }
#pragma unroll
  for (int u = 0; u < 8; ++u) {
    uint32_t a[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) a[j] = AReg<T>(w, u, j);
    float d[2], m[2] = {0.0f, 0.0f};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if constexpr (kMins) {
        const uint32_t dm = Word(w.a[h][u >> 2], u & 3);
        d[h] = HalfLo(dm);
        m[h] = HalfHi(dm);
      } else {
        const uint32_t dw = Word(w.a[h][0], u >> 1);
        d[h] = __fmul_rn((u & 1) ? HalfHi(dw) : HalfLo(dw), kInv);
      }
    }
#pragma unroll
    for (int ct = 0; ct < NT; ++ct) {
      const uint4 b = FragB<C, kSh>(x, ct, u);
      int dh[4], dl[4];
      if constexpr (C == kPaired) {
        int dd[4];
        Mma32<kS8>(dd, a, b.x, b.y);
        dh[0] = dd[0], dl[0] = dd[1], dh[2] = dd[2], dl[2] = dd[3];
        dh[1] = dl[1] = dh[3] = dl[3] = 0;
      } else {
        Mma32<kS8>(dh, a, b.x, b.y);
        Mma32<kS8>(dl, a, b.z, b.w);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (C == kPaired && (i & 1)) continue;
        int xi = 0;
        if constexpr (kMins) {
          const int4 q = xs[ct][i & 1][u >> 2];
          xi = (u & 3) == 0 ? q.x : (u & 3) == 1 ? q.y : (u & 3) == 2 ? q.z : q.w;
        }
        vg[ct][i] = mmv::LegacyUnit(vg[ct][i], dh[i], dl[i], xi, d[i >> 1], m[i >> 1], kMins);
      }
    }
  }
#pragma unroll
  for (int ct = 0; ct < NT; ++ct) {
    float2 dx = make_float2(0.0f, 0.0f);
    if (x.out_ok[ct]) {
      if constexpr (C == kPaired) dx.x = LdX<kSh, float>(x.rec[ct] + mmv::xq::kScale + 4 * t);
      else dx = LdX<kSh, float2>(x.rec[ct] + mmv::xq::kScale + 8 * t);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (C == kPaired && (i & 1)) continue;
      acc[ct][i] = mmv::Fma((i & 1) ? dx.y : dx.x, vg[ct][i], acc[ct][i]);
    }
  }
}

struct MmvMat {
  const uint8_t* w;
  int64_t rows;
  int64_t tile0;  // first tile of this matrix in the launch's tile numbering
  const float* bias;
  float* y;
};
struct MmvParams {
  MmvMat m[kMmvMaxMats];
  int n_mats;
  int n;
  mmv::Plan plan;
  const uint8_t* xq;
  size_t xq_ct;   // bytes per column tile of the activation records
  int64_t tiles;  // of all the launch's matrices
};

constexpr int kTileMaxWarps = 8;

__device__ __forceinline__ const MmvMat& MatOf(const MmvParams& p, int64_t tile) {
  return p.n_mats > 2 && tile >= p.m[2].tile0 ? p.m[2] : p.n_mats > 1 && tile >= p.m[1].tile0 ? p.m[1] : p.m[0];
}

template <int C>
__device__ __forceinline__ void StoreTile(const MmvParams& p, int64_t tile, const float (&acc)[Tiles(C)][4],
                                          int lane, int col0 = 0) {
  const MmvMat& m = MatOf(p, tile);
  const int gq = lane >> 2, t = lane & 3;
  const int64_t local = tile - m.tile0;
#pragma unroll
  for (int ct = 0; ct < Tiles(C); ++ct)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t row = local * mmv::kTileRows + gq + 8 * (i >> 1);
      const int col = OutCol<C>(ct, t, i) + col0;
      if (row < m.rows && col >= col0 && col < p.n) {
        float v = acc[ct][i];
        if (m.bias) v = mmv::Add(v, m.bias[row]);
        m.y[static_cast<size_t>(col) * m.rows + row] = v;
      }
    }
}

template <int C>
__device__ __forceinline__ XView<C> MakeXView(const MmvParams& p, int lane) {
  XView<C> xv;
  const int g = lane >> 2, t = lane & 3;
  if constexpr (C == kPaired) {
    // MMA column g: column g / 2's level g % 2, read where that column's lane
    // with the same t holds it.
    xv.lanex = 4 * (g >> 1) + t;
    xv.frag = 16 * xv.lanex + 8 * (g & 1);
    xv.col_ok[0] = (g >> 1) < p.n;
    xv.out_ok[0] = t < p.n;
  } else {
    xv.lanex = lane;
    xv.frag = 16 * lane;
#pragma unroll
    for (int ct = 0; ct < C; ++ct) {
      xv.col_ok[ct] = 8 * ct + g < p.n;
      xv.out_ok[ct] = 8 * ct + 2 * t < p.n;
    }
  }
  return xv;
}

template <GgmlType T, int C>
__device__ __forceinline__ void Group(const WRegs& w, XView<C>& xv, const MmvParams& p, int64_t g, int lane,
                                      float (&acc)[Tiles(C)][4]) {
#pragma unroll
  for (int ct = 0; ct < Tiles(C); ++ct) xv.rec[ct] = p.xq + ct * p.xq_ct + static_cast<size_t>(g) * mmv::xq::kRec;
  if constexpr (mmv::LayoutOf(T).kquant) GroupK<T, C>(w, xv, lane, acc);
  else GroupLegacy<T, C>(w, xv, lane, acc);
}

// Shared-memory slots per warp. The decode's paired kernel and the 5-8-column
// one keep two (one record in flight while the other is used): the fewer
// bytes a warp holds, the more warps an SM runs, and that wins (round 24,
// H100: the 27B decode 3% and the 7-token pass 4% faster than at 4 and 3
// slots; 6 and 8 slots 9-24% slower than 4). The 16-column kernel keeps about
// 10 KiB of records (2 to 4). The 5-8-column kernel also adds the warps' sums
// in their rings instead of static shared memory: more of its blocks fit per
// SM (round 14: verifies of 5-8 tokens 8% faster, batch 8 9%); the same made
// the paired kernel slower (the 27B step 7.82 -> 8.63-8.75 ms), the 16-column
// one too (the six-stream verify of 30 columns 25.1 -> 29.4 ms).
template <GgmlType T, int C>
constexpr int MmvStages() {
  return C == 2 ? std::clamp(10240 / mmv::LayoutOf(T).rec, 2, 4) : 2;
}
template <GgmlType T, int C>
constexpr size_t MmvSmemPerWarp() {
  return static_cast<size_t>(MmvStages<T, C>()) * mmv::LayoutOf(T).rec;
}

// The warp's copy of one record into a slot (records are whole 16-byte units).
template <int kRec>
__device__ __forceinline__ void CopyRecord(uint8_t* slot, const uint8_t* rec, int lane) {
  static_assert(kRec % 16 == 0);
#pragma unroll
  for (int off = 16 * lane; off < kRec; off += 512) CpAsync16(slot + off, rec + off);
}

// Block = one tile, warp j of tile_warps takes groups [j gpw, (j + 1) gpw),
// streamed through its ring of slots; the warps' sums are added in warp order.
template <GgmlType T, int C>
__device__ __forceinline__ void MmvBody(const MmvParams& p) {
  constexpr int NT = Tiles(C);
  constexpr int kRec = mmv::LayoutOf(T).rec;
  constexpr int kS = MmvStages<T, C>();
  extern __shared__ uint4 mmv_ring[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int64_t tile = blockIdx.x, G = p.plan.groups;
  const MmvMat& m = MatOf(p, tile);
  const uint8_t* base = m.w + static_cast<size_t>(tile - m.tile0) * G * kRec;
  const int64_t g0 = warp * p.plan.gpw, g1 = min(G, g0 + p.plan.gpw);
  uint8_t* ring = reinterpret_cast<uint8_t*>(mmv_ring) + static_cast<size_t>(warp) * kS * kRec;
  // The first kS - 1 records stream in while the activations' producer
  // finishes (programmatic dependent launch); one commit group per record,
  // empty past the warp's end, so that wait_group counts records.
#pragma unroll
  for (int s = 0; s < kS - 1; ++s) {
    if (g0 + s < g1) CopyRecord<kRec>(ring + s * kRec, base + static_cast<size_t>(g0 + s) * kRec, lane);
    CpAsyncCommit();
  }
  // The 9-16-column kernel also requests the record after the ring's next
  // into L2 (no shared memory held for it): more bytes in flight at the same
  // warps an SM (round 25, H100: six sequences' verify of 30 columns 7%
  // faster). In the paired kernel 1-4 records ahead made the decode 14-32%
  // slower; in the 5-8-column one batch 6-8 gained ~1.5%, but its spills
  // under 80 registers grew (Q4_1 0 -> 64 bytes): neither does it.
  auto l2_ahead = [&](int64_t g) {
    if (C == 2 && g < g1)
      for (int off = 128 * lane; off < kRec; off += 32 * 128) PrefetchL2(base + static_cast<size_t>(g) * kRec + off);
  };
  l2_ahead(g0 + kS - 1);
  GridDepWait();  // the activations come from the previous kernel
  XView<C> xv = MakeXView<C>(p, lane);
  float acc[NT][4];
#pragma unroll
  for (int ct = 0; ct < NT; ++ct)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[ct][i] = 0.0f;
  int slot = 0;
  for (int64_t g = g0; g < g1; ++g) {
    CpAsyncWait<kS - 2>();  // record g has landed (this lane's copies)
    __syncwarp();           // ... and every lane's; the slot refilled below was read last round
    WRegs w;
    LoadW<T>(ring + slot * kRec, lane, w);
    const int fill = slot == 0 ? kS - 1 : slot - 1;
    if (g + kS - 1 < g1) CopyRecord<kRec>(ring + fill * kRec, base + static_cast<size_t>(g + kS - 1) * kRec, lane);
    CpAsyncCommit();
    l2_ahead(g + kS);
    slot = slot == kS - 1 ? 0 : slot + 1;
    Group<T, C>(w, xv, p, g, lane, acc);
  }
  GridDepLaunch();
  if constexpr (C == 1) {
    // The warps' sums meet in their own rings (whose copies have all landed).
    if (nw > 1) {
      constexpr int kStride = kS * kRec / 4;
      static_assert(NT * 4 * 32 <= kStride, "a warp's sums fit in its ring");
      CpAsyncWait<0>();
      float* red = reinterpret_cast<float*>(mmv_ring);
#pragma unroll
      for (int i = 0; i < 4; ++i) red[warp * kStride + i * 32 + lane] = acc[0][i];
      __syncthreads();
      if (warp != 0) return;
      for (int w = 1; w < nw; ++w)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[0][i] = mmv::Add(acc[0][i], red[w * kStride + i * 32 + lane]);
    }
  } else {
    __shared__ float red[kTileMaxWarps][NT][4][32];
    if (nw > 1) {
#pragma unroll
      for (int ct = 0; ct < NT; ++ct)
#pragma unroll
        for (int i = 0; i < 4; ++i) red[warp][ct][i][lane] = acc[ct][i];
      __syncthreads();
      if (warp != 0) return;
      for (int w = 1; w < nw; ++w)
#pragma unroll
        for (int ct = 0; ct < NT; ++ct)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[ct][i] = mmv::Add(acc[ct][i], red[w][ct][i][lane]);
    }
  }
  StoreTile<C>(p, tile, acc, lane);
}

// The 16-column kernel.
template <GgmlType T>
__global__ void __launch_bounds__(32 * kTileMaxWarps) MmvKernel9to16(const __grid_constant__ MmvParams p) {
  MmvBody<T, 2>(p);
}
// The paired (decode, 1-4 columns) kernel. Where ptxas gives it more than 72
// registers (Q4_K 76, Q6_K and Q8_0 80) it is capped at 72: with two ring
// slots registers limit its warps an SM (28 at 72 instead of 25) and the
// decode is 3% faster (round 25 call A, H100: 7.78 -> 7.52 ms at context
// 64, 8.76 -> 8.56 at 4200); at 64 Q5_K/Q6_K/Q8_0 spilled, with no gain. The
// others (58-64) keep launch bounds: under __maxnreg__ ptxas spends the
// whole cap.
template <GgmlType T>
__global__ void __launch_bounds__(32 * kTileMaxWarps) MmvKernelPaired(const __grid_constant__ MmvParams p) {
  MmvBody<T, kPaired>(p);
}
template <GgmlType T>
__global__ void __maxnreg__(72) MmvKernelPaired72(const __grid_constant__ MmvParams p) {
  MmvBody<T, kPaired>(p);
}
template <GgmlType T>
constexpr auto PairedKernel() {
  if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q6_K || T == GgmlType::Q8_0) return MmvKernelPaired72<T>;
  else return MmvKernelPaired<T>;
}
// The 5-8-column kernel near the paired kernel's register budget: the plan
// sizes each launch's waves by the smaller residency of the two, and at its
// own 97-110 registers this kernel kept fewer warps resident, so launches
// planned as one wave ran a partial second one (round 23, an H100: batch 6-8
// decode 4-6% and verify 7 at 4200 4% faster at 80; with two ring slots
// ptxas spills 8 bytes for Q4_K, 12-32 for Q5_K/Q6_K/Q8_0, 116 for Q5_1).
// The 9-16-column kernel at 112 of its 128 registers was 8% slower on 30
// columns: not capped.
template <GgmlType T>
__global__ void __maxnreg__(80) MmvKernel5to8(const __grid_constant__ MmvParams p) {
  MmvBody<T, 1>(p);
}

// ---- the wide kernel: 17-32 columns, activations staged once a block ----
// At 9-16 columns the per-tile kernels read each group's activation records
// (~2.4x the weight record's bytes an 8-column tile) from L2 in every block:
// the loads' latency at 128 registers a warp was half its stall (ncu, round
// 19), and 30 columns took two passes of ~1.6x a decode each. Here a block's
// warps are consecutive tiles walking the same groups: the group's records
// of all column tiles land once in shared memory (cp.async, one stage ahead,
// with the warps' weight records) and every warp reads them there. The
// block does one of the plan's parts (grid y): the sums are the per-tile
// kernels' to the bit, the parts folded in part order by the last block of
// the tile range to arrive (partial sums through a global scratch). Round 26
// call W (H100): the six-sequence verify of 30 columns 29.2 -> 25.6 ms, its
// matvecs 23.0 -> 18.7 ms (ncu); from 9 columns no different at 30, from 5
// the batches of 6-8 14% slower; a 64-column instance (prompts in passes of
// 64) slower than two of 32, and prompts slower than dequantized F16 tiles
// and cuBLAS. Small launches (64 tiles) lose to two 16-column passes.
// Round 31 (H100): k-quant groups in one pass over the units for all column
// tiles (GroupKWide), the tile count compile-time, the copies walking
// pointers: Q4_K 25600 x 5120 / 5120 x 25600 at 30 columns 79 / 93 -> 71 /
// 80 us, the six-sequence verify of 30 columns 5-8% faster. Not kept there:
// the staged pieces packed so that a third stage or four 4-warp blocks fit
// an SM (73 / 84 us with three stages, 91 / 99 with 4-warp blocks).
constexpr int kWideMaxWarps = 8;
constexpr int kWideCols = 32;
// Two stages (one group in flight): three were slower (round 26 call W,
// round 31 call B).
constexpr int kWideStages = 2;
// The bytes of an activation record the mma.sync wide kernel reads and stages
// (all but the K-major copy at xq::kWide, the wgmma kernel's).
constexpr int kWideXRec = mmv::xq::kWide;
// The 16-byte pieces of an activation record a type reads: the fragments,
// the limb sums (k-quants with mins) or unit sums (legacy with mins), the
// 8 columns' scales.
template <GgmlType T>
constexpr int WideXExtra() {
  constexpr Layout l = mmv::LayoutOf(T);
  return !mmv::HasMins(T) ? 0 : l.kquant ? 512 / 16 : 256 / 16;
}
template <GgmlType T>
constexpr int WideXPieces() {
  return mmv::xq::kLimb32 / 16 + WideXExtra<T>() + 2;
}
template <GgmlType T>
__device__ __forceinline__ int WideXOffset(int j) {
  constexpr Layout l = mmv::LayoutOf(T);
  constexpr int kF = mmv::xq::kLimb32 / 16, kE = WideXExtra<T>();
  constexpr int kExtra = l.kquant ? (l.unit16 ? mmv::xq::kLimb16 : mmv::xq::kLimb32) : mmv::xq::kSum32;
  return j < kF ? 16 * j : j < kF + kE ? kExtra + 16 * (j - kF) : mmv::xq::kScale + 16 * (j - kF - kE);
}
template <GgmlType T>
constexpr size_t WideSmem(int warps, int cts) {
  return static_cast<size_t>(kWideStages) * (static_cast<size_t>(cts) * kWideXRec +
                                             static_cast<size_t>(warps) * mmv::LayoutOf(T).rec);
}

// A k-quant group of the wide kernel: every staged column tile in one pass
// over the units, so that a unit's codes are expanded (and its scales read)
// once for all tiles rather than once a tile, and read from the ring as the
// units need them instead of held. The same integers and the same float
// expression as GroupK, so the same bits. The stage holds whole column tiles:
// columns past n are multiplied without predicates and never stored (their
// D columns are their own). With the kernel's lean copies (ncu, round 31
// call A, H100, Q4_K 25600 x 5120 at 30 columns) 827 warp instructions a
// tile and group where the per-tile calls issued 1111 (round 30's lean
// prototype, docs/runs/round30/proto_f16mma.cu: 773).
template <GgmlType T, int NT>
__device__ __forceinline__ void GroupKWide(const uint8_t* rec, const uint8_t* xr, int lane, float (&acc)[NT][1][4]) {
  constexpr Layout l = mmv::LayoutOf(T);
  WRegs w;
  LoadW<T, false>(rec, lane, w);
  KScales s;
  DecodeK<T>(w, s);
  int shi[NT][4], slo[NT][4];
#pragma unroll
  for (int ct = 0; ct < NT; ++ct)
#pragma unroll
    for (int i = 0; i < 4; ++i) shi[ct][i] = slo[ct][i] = 0;
  const uint8_t* xf = xr + mmv::xq::kFrag + 16 * lane;
#pragma unroll
  for (int u = 0; u < 8; ++u) {
    if constexpr (l.p4 >= 0)
      if ((u & 1) == 0) w.p4[u >> 1] = LdS(rec + l.p4 + 512 * (u >> 1) + 16 * lane);
    if constexpr (l.p2 >= 0)
      if ((u & 3) == 0) w.p2[u >> 2] = LdS(rec + l.p2 + 512 * (u >> 2) + 16 * lane);
    if constexpr (l.p1 >= 0)
      if (u == 0) w.p1 = LdS(rec + l.p1 + 16 * lane);
    uint32_t a[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) a[j] = AReg<T>(w, u, j);
#pragma unroll
    for (int ct = 0; ct < NT; ++ct) KUnit<T>(a, LdS(xf + ct * kWideXRec + 512 * u), s, u, shi[ct], slo[ct]);
  }
  const int t = lane & 3;
#pragma unroll
  for (int ct = 0; ct < NT; ++ct) {
    const uint8_t* x = xr + ct * kWideXRec;
    int m[4] = {0, 0, 0, 0};
    if constexpr (mmv::HasMins(T)) {  // as GroupK
      uint32_t ma0, ma1;
      KMinFrags<T>(s, t, ma0, ma1);
      KMins(ma0, ma1, LdS(x + (l.unit16 ? mmv::xq::kLimb16 : mmv::xq::kLimb32) + 16 * lane), m);
    }
    const float2 dx = *reinterpret_cast<const float2*>(x + mmv::xq::kScale + 8 * t);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float v = mmv::KGroupValue(shi[ct][i], slo[ct][i], m[i], s.d[i >> 1], s.off[i >> 1]);
      acc[ct][0][i] = mmv::Fma((i & 1) ? dx.y : dx.x, v, acc[ct][0][i]);
    }
  }
}

// The wide kernels' outputs: a tile's sums, or with the plan's parts (grid
// y) each part's sums through the scratch, folded in part order by the last
// block of the tile range to arrive.
template <int kNT>
__device__ __forceinline__ void WideStore(const MmvParams& p, const MmvScratch& s, int64_t tile, bool active,
                                          int lane, float (&acc)[kNT][1][4]) {
  const int part = blockIdx.y, parts = gridDim.y;
  const int g = lane >> 2, t = lane & 3;
  if (parts == 1) {
    if (active)
#pragma unroll
      for (int ct = 0; ct < kNT; ++ct) StoreTile<1>(p, tile, acc[ct], lane, 8 * ct);
    return;
  }
  const size_t lrows = static_cast<size_t>(p.tiles) * mmv::kTileRows;
  auto at = [&](int pt, int col, int i) {
    return (static_cast<size_t>(pt) * kWideCols + col) * lrows + static_cast<size_t>(tile) * mmv::kTileRows + g +
           8 * (i >> 1);
  };
  if (active)
#pragma unroll
    for (int ct = 0; ct < kNT; ++ct)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int col = 8 * ct + 2 * t + (i & 1);
        if (col < p.n) s.part[at(part, col, i)] = acc[ct][0][i];
      }
  if (!LastBlockArrives(s.counter + blockIdx.x, parts) || !active) return;
  // The parts in order, a part's 4 kNT loads issued together: one L2 round
  // trip a part. Output by output (a round trip an output) these folds were
  // ~21% of the kernel's warp stall samples (round 31's ncu); a part at a time
  // made 30 columns 9-13% faster (round 34; four parts a time: no better).
  for (int pt = 0; pt < parts; ++pt) {
    float v[kNT][4];
#pragma unroll
    for (int ct = 0; ct < kNT; ++ct)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int col = 8 * ct + 2 * t + (i & 1);
        v[ct][i] = col < p.n ? __ldcg(s.part + at(pt, col, i)) : 0.0f;
      }
#pragma unroll
    for (int ct = 0; ct < kNT; ++ct)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[ct][0][i] = pt == 0 ? v[ct][i] : mmv::Add(acc[ct][0][i], v[ct][i]);
  }
#pragma unroll
  for (int ct = 0; ct < kNT; ++ct) StoreTile<1>(p, tile, acc[ct], lane, 8 * ct);
}

// kNT column tiles of 8 (3 for 17-24 columns, 4 for 25-32). Scratch: part
// [part][column][launch row], a counter a block column.
template <GgmlType T, int kNT>
__global__ void __launch_bounds__(32 * kWideMaxWarps, 2) MmvKernelWide(const __grid_constant__ MmvParams p,
                                                                     const MmvScratch s) {
  constexpr int kRec = mmv::LayoutOf(T).rec;
  constexpr int kS = kWideStages;
  extern __shared__ uint4 wide_smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * nw + warp;
  const bool active = tile < p.tiles;
  const int part = blockIdx.y;
  const int64_t G = p.plan.groups, g0 = part * p.plan.gpw, ng = min(G, g0 + p.plan.gpw) - g0;
  const size_t xstage = static_cast<size_t>(kNT) * kWideXRec;
  uint8_t* xs = reinterpret_cast<uint8_t*>(wide_smem);
  uint8_t* ring = xs + kS * xstage + static_cast<size_t>(warp) * kS * kRec;
  const MmvMat& m = MatOf(p, active ? tile : 0);
  const uint8_t* wbase = m.w + static_cast<size_t>(tile - m.tile0) * G * kRec + static_cast<size_t>(g0) * kRec;
  // The requests walk both streams with pointers (the index arithmetic of
  // a flat piece loop was a tenth of the kernel's instructions, ncu round 31);
  // a thread copies the same pieces of every column tile.
  const uint8_t* wnext = wbase;
  const uint8_t* xnext = p.xq + static_cast<size_t>(g0) * mmv::xq::kRec;
  auto copy = [&](int i, bool weights, bool acts) {
    if (i >= ng) return;
    const int stage = i % kS;
    if (weights && active) CopyRecord<kRec>(ring + stage * kRec, wnext, lane);
    if (weights) wnext += kRec;
    if (!acts) return;
    uint8_t* dst = xs + stage * xstage;
    constexpr int kP = WideXPieces<T>();
    for (int j = threadIdx.x; j < kP; j += blockDim.x) {
      const int off = WideXOffset<T>(j);
#pragma unroll
      for (int ct = 0; ct < kNT; ++ct) CpAsync16(dst + ct * kWideXRec + off, xnext + ct * p.xq_ct + off);
    }
    xnext += mmv::xq::kRec;
  };
  // Weights stream in while the activations' producer finishes (programmatic
  // dependent launch); one commit group per stage, so wait_group counts them.
#pragma unroll
  for (int i = 0; i < kS - 1; ++i) {
    copy(i, true, false);
    CpAsyncCommit();
  }
  GridDepWait();
#pragma unroll
  for (int i = 0; i < kS - 1; ++i) {
    copy(i, false, true);
    CpAsyncCommit();
  }
  float acc[kNT][1][4];
#pragma unroll
  for (int ct = 0; ct < kNT; ++ct)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[ct][0][i] = 0.0f;
  const int g = lane >> 2, t = lane & 3;
  for (int i = 0; i < ng; ++i) {
    CpAsyncWait<kS - 2>();  // stage i landed (this thread's copies)
    __syncthreads();        // ... and everyone's; stage i - 1 is free
    copy(i + kS - 1, true, true);
    CpAsyncCommit();
    if (active) {
      const uint8_t* xr = xs + (i % kS) * xstage;
      if constexpr (mmv::LayoutOf(T).kquant) {
        GroupKWide<T, kNT>(ring + (i % kS) * kRec, xr, lane, acc);
      } else {
        WRegs w;
        LoadW<T>(ring + (i % kS) * kRec, lane, w);
#pragma unroll
        for (int ct = 0; ct < kNT; ++ct) {
          XView<1> xv;
          xv.rec[0] = xr + ct * kWideXRec;
          xv.lanex = lane;
          xv.frag = 16 * lane;
          xv.col_ok[0] = 8 * ct + g < p.n;
          xv.out_ok[0] = 8 * ct + 2 * t < p.n;
          GroupLegacy<T, 1, true>(w, xv, lane, acc[ct]);
        }
      }
    }
  }
  GridDepLaunch();
  WideStore<kNT>(p, s, tile, active, lane, acc);
}

// ---- the matvec on wgmma (sm_90a; Q4_K, Q5_K; the tuning's column range,
// 9-32 by default: round 43, H100, at 30 columns 6-14% faster than
// MmvKernelWide on every 27B matrix with two stages a block and at most 128
// registers a thread (four 4-warp blocks an SM; with three stages, or 133-141
// registers, three: 8-12% slower than MmvKernelWide)) ----
// A warpgroup (4 warps, a tile each: 64 rows) multiplies its tiles' codes by
// all staged columns at once with wgmma.m64n{8 kNT}k32: A, the codes, from
// registers in mma fragment order (which is wgmma's register-A order), B, one
// activation level of one unit for every column, read by the hardware from
// shared memory (the records' K-major copy, xq::kWide: core matrices of 8
// columns x 16 bytes, LBO = 128 the K step, SBO = 4096 the column-tile step).
// The unit scales are folded into the codes in two 3-bit halves (q sl and q
// sh, at most 31 x 7 = 217: u8), so the units chain in four accumulators (hi
// x sl, hi x sh, lo x sl, lo x sh) and a group's integers come out as
// shi = D0 + 8 D1, slo = D2 + 8 D3 with no per-unit multiply-add: the same
// integers as GroupKWide's (exact), the same float expression, so the same
// bits. The mma.sync wide kernel issued ~830 warp instructions a tile and
// group, 256 of them the per-unit scale IMADs (round 31's ncu).
template <int kNT>
__device__ __forceinline__ void WgMma(int (&d)[4 * kNT], const uint32_t* a, uint64_t desc, int acc) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (kNT == 4) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k32.s32.u8.s8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
        "%13, %14, %15}, {%16, %17, %18, %19}, %20, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
          "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(acc));
  } else if constexpr (kNT == 3) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %17, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n24k32.s32.u8.s8 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11}, "
        "{%12, %13, %14, %15}, %16, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
          "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(acc));
  } else if constexpr (kNT == 2) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k32.s32.u8.s8 {%0, %1, %2, %3, %4, %5, %6, %7}, "
        "{%8, %9, %10, %11}, %12, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(acc));
  } else {
    static_assert(kNT == 1);
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k32.s32.u8.s8 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p;\n}\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(acc));
  }
#endif
}
__device__ __forceinline__ void WgFence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void WgCommit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void WgWait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Orders this thread's completed shared-memory writes (cp.async) before the
// async proxy's reads (wgmma's B).
__device__ __forceinline__ void WgProxyFence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// Shared-memory matrix descriptor, no swizzle: start, LBO, SBO (bytes / 16).
__device__ __forceinline__ uint64_t WgDesc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((saddr & 0x3FFFF) >> 4) | (static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32);
}
__global__ void WgProbeKernel(int* ok) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *ok = 1;
#else
  *ok = 0;
#endif
}

// Two stages a block: with at most 128 registers a thread (the launch bounds)
// four 4-warp blocks an SM fit, where three stages held three.
constexpr int kWgStages = 2;
constexpr int64_t kWgNarrowMinTiles = 256;  // 4096 rows
constexpr int kWgXExtra = 512 + 32;  // a column tile's limb sums (32-element units) and scales
template <GgmlType T>
constexpr size_t WgStage(int warps, int cts) {
  const size_t b = static_cast<size_t>(cts) * 4096 + static_cast<size_t>(warps) * mmv::LayoutOf(T).rec +
                   static_cast<size_t>(cts) * kWgXExtra;
  return (b + 127) / 128 * 128;
}
template <GgmlType T>
constexpr size_t WgSmem(int warps, int cts) {
  return kWgStages * WgStage<T>(warps, cts);
}
template <GgmlType T>
constexpr bool WgType() {
  return T == GgmlType::Q4_K || T == GgmlType::Q5_K;
}

// A block of 4 or 8 warps (one or two warpgroups), a tile each, over the
// plan's part (grid y) of the groups; stage: [column tile][the K-major copy],
// [warp][weight record], [column tile][limb sums, scales].
template <GgmlType T, int kNT>
__global__ void __launch_bounds__(256, 2) MmvKernelWideWg(const __grid_constant__ MmvParams p, const MmvScratch s) {
  constexpr Layout l = mmv::LayoutOf(T);
  constexpr int kRec = l.rec, kS = kWgStages, kD = 4 * kNT;
  extern __shared__ __align__(128) uint8_t wg_smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * nw + warp;
  const bool active = tile < p.tiles;
  const int part = blockIdx.y;
  const int64_t G = p.plan.groups, g0 = part * p.plan.gpw, ng = min(G, g0 + p.plan.gpw) - g0;
  const size_t stage = (static_cast<size_t>(kNT) * 4096 + static_cast<size_t>(nw) * kRec +
                        static_cast<size_t>(kNT) * kWgXExtra + 127) / 128 * 128;
  const size_t wofs = static_cast<size_t>(kNT) * 4096, xofs = wofs + static_cast<size_t>(nw) * kRec;
  const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(wg_smem));
  const MmvMat& m = MatOf(p, active ? tile : 0);
  const uint8_t* wnext = m.w + static_cast<size_t>(tile - m.tile0) * G * kRec + static_cast<size_t>(g0) * kRec;
  const uint8_t* xnext = p.xq + static_cast<size_t>(g0) * mmv::xq::kRec;
  auto copy = [&](int64_t i, bool weights, bool acts) {
    if (i >= ng) return;
    uint8_t* st = wg_smem + (i % kS) * stage;
    if (weights && active) CopyRecord<kRec>(st + wofs + static_cast<size_t>(warp) * kRec, wnext, lane);
    if (weights) wnext += kRec;
    if (!acts) return;
    // (kNT x 256 pieces of the K-major copies, then kNT x 34 of limbs and scales)
    for (int j = threadIdx.x; j < kNT * 290; j += blockDim.x) {
      if (j < kNT * 256) {
        const int ct = j >> 8, off = 16 * (j & 255);
        CpAsync16(st + ct * 4096 + off, xnext + ct * p.xq_ct + mmv::xq::kWide + off);
      } else {
        const int r = j - kNT * 256, ct = r / 34, q = r - ct * 34;
        const int src = q < 32 ? mmv::xq::kLimb32 + 16 * q : mmv::xq::kScale + 16 * (q - 32);
        CpAsync16(st + xofs + ct * kWgXExtra + 16 * q, xnext + ct * p.xq_ct + src);
      }
    }
    xnext += mmv::xq::kRec;
  };
#pragma unroll
  for (int i = 0; i < kS - 1; ++i) {
    copy(i, true, false);
    CpAsyncCommit();
  }
  GridDepWait();
#pragma unroll
  for (int i = 0; i < kS - 1; ++i) {
    copy(i, false, true);
    CpAsyncCommit();
  }
  float acc[kNT][1][4];
#pragma unroll
  for (int ct = 0; ct < kNT; ++ct)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[ct][0][i] = 0.0f;
  const int t = lane & 3;
  for (int64_t i = 0; i < ng; ++i) {
    CpAsyncWait<kS - 2>();  // stage i landed (this thread's copies)
    WgProxyFence();         // ... visible to wgmma's reads
    __syncthreads();        // ... everyone's; stage i - 1 is free
    copy(i + kS - 1, true, true);
    CpAsyncCommit();
    const uint8_t* st = wg_smem + (i % kS) * stage;
    const uint8_t* rec = st + wofs + static_cast<size_t>(warp) * kRec;
    const uint32_t xb = sbase + static_cast<uint32_t>((i % kS) * stage);
    WRegs w;
    LoadW<T, false>(rec, lane, w);
    KScales sc;
    DecodeK<T>(w, sc);
    int d0[kD], d1[kD], d2[kD], d3[kD];
    uint32_t ab[2][8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      if constexpr (l.p4 >= 0)
        if ((u & 1) == 0) w.p4[u >> 1] = LdS(rec + l.p4 + 512 * (u >> 1) + 16 * lane);
      if constexpr (l.p1 >= 0)
        if (u == 0) w.p1 = LdS(rec + l.p1 + 16 * lane);
      uint32_t* a = ab[u & 1];
      if (u >= 2) WgWait<1>();  // unit u - 2's wgmmas (the same registers) are done
      const uint32_t s0 = static_cast<uint32_t>(KUnitScale<T>(sc, 0, u)), s1 = static_cast<uint32_t>(KUnitScale<T>(sc, 1, u));
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint32_t c = AReg<T>(w, u, j), sj = (j & 1) ? s1 : s0;  // rows g + 8 (j odd) or g
        a[j] = c * (sj & 7);        // bytes <= 31 x 7: no carry between them
        a[4 + j] = c * (sj >> 3);
      }
      WgFence();
      const uint64_t dh = WgDesc(xb + 256 * (2 * u), 128, 4096), dl = WgDesc(xb + 256 * (2 * u + 1), 128, 4096);
      WgMma<kNT>(d0, a, dh, u > 0);
      WgMma<kNT>(d1, a + 4, dh, u > 0);
      WgMma<kNT>(d2, a, dl, u > 0);
      WgMma<kNT>(d3, a + 4, dl, u > 0);
      WgCommit();
    }
    WgWait<0>();
#pragma unroll
    for (int ct = 0; ct < kNT; ++ct) {
      const uint8_t* x = st + xofs + ct * kWgXExtra;
      int mi[4] = {0, 0, 0, 0};
      uint32_t ma0, ma1;
      KMinFrags<T>(sc, t, ma0, ma1);
      KMins(ma0, ma1, LdS(x + 16 * lane), mi);
      const float2 dx = *reinterpret_cast<const float2*>(x + 512 + 8 * t);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = 4 * ct + e;
        const float v = mmv::KGroupValue(d0[j] + 8 * d1[j], d2[j] + 8 * d3[j], mi[e], sc.d[e >> 1], sc.off[e >> 1]);
        acc[ct][0][e] = mmv::Fma((e & 1) ? dx.y : dx.x, v, acc[ct][0][e]);
      }
    }
    WgFence();  // the accumulators were read: the next group's wgmmas write them
  }
  GridDepLaunch();
  WideStore<kNT>(p, s, tile, active, lane, acc);
}

// ---- activation quantization (standalone pass; the producers fuse it: k_common.cuh's quantizers) ----
__global__ void QuantizeXKernel(const float* x, int n, int64_t k, uint8_t* xq) {
  GridDepWait();  // programmatic dependent launch: inputs are ready after this
  GridDepLaunch();
  const int64_t groups = mmv::Groups(k);
  const int64_t wid = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (wid >= groups * n) return;
  const int col = static_cast<int>(wid / groups);
  const int64_t g = wid % groups;
  const int lane = threadIdx.x & 31;
  float v[8];
#pragma unroll
  for (int u = 0; u < 8; ++u) {
    const int64_t e = g * mmv::kGroup + 32 * u + lane;
    v[u] = e < k ? x[static_cast<size_t>(col) * k + e] : 0.0f;
  }
  QuantizeGroupWarp(v, col, g, groups, xq);
}

// ---- packing (one warp per record) ----
template <GgmlType T>
__global__ void PackKernel(const uint8_t* gguf, size_t row_bytes, int64_t rows, int64_t k, int64_t tile0,
                           int64_t ntiles, uint8_t* packed) {
  const int64_t groups = mmv::Groups(k);
  const int64_t wid = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (wid >= ntiles * groups) return;
  const int64_t tile = tile0 + wid / groups, g = wid % groups;
  const uint8_t* rp[mmv::kTileRows];
#pragma unroll
  for (int rr = 0; rr < mmv::kTileRows; ++rr) {
    const int64_t r = tile * mmv::kTileRows + rr;
    rp[rr] = r < rows ? gguf + static_cast<size_t>(r - tile0 * mmv::kTileRows) * row_bytes : nullptr;
  }
  mmv::PackLane(T, rp, k, g, threadIdx.x & 31, packed + mmv::RecordOffset(T, groups, tile, g));
}

// ---- dequantization of packed rows (prefill tiles, the reference path, embeddings) ----
// One warp per (row, group) and eight elements per lane, so that a warp
// writes its row's 256 elements as 512 contiguous bytes (F16); a block's 16
// warps are 16 consecutive output rows of one group, which read one record
// (L1) when they are one tile. Rows r0.. of the matrix (or row_ids[i]) ->
// dst rows 0.. of `ld` elements (F16 or F32).
constexpr int kDequantRows = 16;
template <GgmlType T>
__global__ void __launch_bounds__(32 * kDequantRows) DequantPackedKernel(const uint8_t* packed, int64_t k,
                                                                         const int32_t* row_ids, int64_t r0,
                                                                         int64_t nrows, void* dst, int64_t ld,
                                                                         bool to_f16) {
  // The row's scale bytes are copied once per warp (a byte per lane) into
  // shared memory, where the decode indexes them: read by every lane from
  // global memory they were a chain of byte loads through a local copy.
  __shared__ mmv::RowAux aux[kDequantRows];
  GridDepWait();  // programmatic dependent launch: inputs are ready after this
  GridDepLaunch();
  const int64_t groups = mmv::Groups(k);
  const int64_t g = blockIdx.x % groups;
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t i = (blockIdx.x / groups) * kDequantRows + w;
  const int e0 = 8 * lane;
  if (i >= nrows) return;  // the whole warp
  const int64_t r = row_ids ? row_ids[i] : r0 + i;
  const uint8_t* rec = packed + mmv::RecordOffset(T, groups, r / mmv::kTileRows, g);
  const int rr = static_cast<int>(r % mmv::kTileRows);
  constexpr mmv::Layout kL = mmv::LayoutOf(T);
  mmv::RowAux& x = aux[w];
  x.a[lane] = mmv::AuxByteA(kL, rec, rr, lane);  // mmv::RecordAux, a byte per lane
  if (lane < 4) x.b[lane] = mmv::AuxByteB(kL, rec, rr, lane);
  __syncwarp();
  if (g * mmv::kGroup + e0 >= k) return;  // K is a multiple of 32: whole eights
  float y[8];
  mmv::DequantRecord8(T, rec, rr, x, e0, y);
  const int64_t off = i * ld + g * mmv::kGroup + e0;
  const bool aligned = (reinterpret_cast<uintptr_t>(dst) & 15) == 0;
  if (to_f16) {
    __half* o = static_cast<__half*>(dst) + off;
    if (aligned && ld % 8 == 0) {
      __half2 h[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) h[q] = __floats2half2_rn(y[2 * q], y[2 * q + 1]);
      *reinterpret_cast<uint4*>(o) = *reinterpret_cast<const uint4*>(h);
    } else {
#pragma unroll
      for (int q = 0; q < 8; ++q) o[q] = __float2half_rn(y[q]);
    }
  } else {
    float* o = static_cast<float*>(dst) + off;
    if (aligned && ld % 4 == 0) {
      reinterpret_cast<float4*>(o)[0] = make_float4(y[0], y[1], y[2], y[3]);
      reinterpret_cast<float4*>(o)[1] = make_float4(y[4], y[5], y[6], y[7]);
    } else {
#pragma unroll
      for (int q = 0; q < 8; ++q) o[q] = y[q];
    }
  }
}

template <class F>
bool DispatchPacked(GgmlType t, F&& f) {
  switch (t) {
#define SPECD_CASE(T) \
  case GgmlType::T: f.template operator()<GgmlType::T>(); return true;
    SPECD_CASE(Q4_0) SPECD_CASE(Q4_1) SPECD_CASE(Q5_0) SPECD_CASE(Q5_1) SPECD_CASE(Q8_0)
    SPECD_CASE(Q2_K) SPECD_CASE(Q3_K) SPECD_CASE(Q4_K) SPECD_CASE(Q5_K) SPECD_CASE(Q6_K)
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
  GridDepWait();  // programmatic dependent launch: inputs are ready after this
  GridDepLaunch();
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
  LaunchPdl(FmvKernel<T, NC>, dim3(grid), dim3(wpb * 32), 0, s, static_cast<const uint8_t*>(w), row_bytes, rows, k, x, ldx, n, bias, y,
                                             ldy, vec);
}

}  // namespace

bool MmvSupported(GgmlType type) { return mmv::HasLayout(type); }

size_t MmvPackedBytes(GgmlType type, int64_t rows, int64_t k) { return mmv::PackedBytes(type, rows, k); }

namespace {
// Per GgmlType (low 6 bits) and warps per block w = 1..kTileMaxWarps: warps
// the device runs at once of the paired (decode) kernel or the 5-8-column
// one, whichever is fewer. The split must not depend on n (decode and verify
// sum in the same order), so every kernel runs one plan: sized by the smaller
// residency, neither the decode nor a verify of 5-8 tokens plans a wave it
// cannot run (round 25: the paired kernel's own residency at 72 registers
// made 5-8-column verifies 2-3% slower); the 9-16-column one at its 128
// registers runs a partial second wave where those have one (round 11:
// passes of 5-8 columns were ~8% slower than with their own plan).
int64_t g_resident[64][kTileMaxWarps + 1] = {};
// A warp's fixed cost (first load's latency, launch, sums) in units of one
// group's streaming time, fitted on the H200 (device call 4: a 25600 x 5120
// Q4_K matrix at 2 warps x 10 groups took 28.9 us, at 10 warps x 2 groups
// 50.8 us).
constexpr double kWarpOverheadGroups = 4.3;
}  // namespace

// The warps per tile whose launch is cheapest when a launch costs its waves
// (warps over what the device runs at once, rounded up) times each warp's
// time (its groups plus a fixed overhead).
mmv::Plan MmvPlan(GgmlType type, int64_t tiles, int64_t k) {
  const int ti = static_cast<int>(type) & 63;
  const int64_t groups = mmv::Groups(k);
  int64_t best_w = 1;
  double best = 0;
  for (int64_t w = 1; w <= std::min<int64_t>(groups, kTileMaxWarps); ++w) {
    const mmv::Plan p = mmv::Plan::Tile(tiles, groups, w);
    if (p.tile_warps != w) continue;  // the same split as a smaller w
    const int64_t cap = g_resident[ti][w] > 0 ? g_resident[ti][w] : int64_t{GetDeviceInfo().sm_count} * 16;
    const double cost = std::ceil(static_cast<double>(p.warps) / static_cast<double>(cap)) *
                        (static_cast<double>(p.gpw) + kWarpOverheadGroups);
    if (best == 0 || cost < best) {
      best = cost;
      best_w = w;
    }
  }
  return mmv::Plan::Tile(tiles, groups, best_w);
}

cudaError_t LaunchPack(GgmlType type, const void* gguf, size_t row_bytes, int64_t rows, int64_t k, int64_t tile0,
                       int64_t ntiles, void* packed, cudaStream_t s) {
  const int64_t warps = ntiles * mmv::Groups(k);
  if (warps <= 0) return cudaSuccess;
  const bool ok = DispatchPacked(type, [&]<GgmlType T>() {
    PackKernel<T><<<CeilDiv(warps * 32, 128), 128, 0, s>>>(static_cast<const uint8_t*>(gguf), row_bytes, rows, k,
                                                           tile0, ntiles, static_cast<uint8_t*>(packed));
  });
  return ok ? LaunchResult() : cudaErrorInvalidValue;
}

size_t XQuantBytes(int n, int64_t k) { return mmv::XqBytes(n, k); }

cudaError_t LaunchQuantizeX(const float* x, int n, int64_t k, void* xq, cudaStream_t s) {
  const int64_t warps = static_cast<int64_t>(n) * mmv::Groups(k);
  if (warps <= 0) return cudaSuccess;
  LaunchPdl(QuantizeXKernel, dim3(CeilDiv(warps * 32, 128)), dim3(128), 0, s, x, n, k, static_cast<uint8_t*>(xq));
  return LaunchResult();
}

namespace {
// Per GgmlType and log2(warps) - 1 (2, 4, 8 warps): wide blocks an SM runs
// at once; the wgmma kernel's (4, 8 warps: entries 1, 2), 0 where it does not
// run (not Q4_K / Q5_K, or no sm_90a code for this device).
int64_t g_wide_blocks[64][3] = {};
int64_t g_wg_blocks[64][3] = {};
bool WgRuns(GgmlType type) {
  const int64_t* b = g_wg_blocks[static_cast<int>(type) & 63];
  return b[1] > 0 || b[2] > 0;
}

int WideWarps(GgmlType type, int64_t tiles, int64_t parts, bool wg) {
  // The fewest waves; among those, a launch that fills every SM, then the
  // most warps (the activation records shared by more tiles). A size whose
  // shared memory the device cannot give a block (0 blocks) is skipped.
  const int64_t sms = GetDeviceInfo().sm_count;
  int best = 0;
  int64_t best_waves = 0;
  bool best_fills = false;
  for (int l = 2; l >= 0; --l) {
    const int w = 2 << l;
    const int64_t per_sm = (wg ? g_wg_blocks : g_wide_blocks)[static_cast<int>(type) & 63][l];
    if (per_sm < 1) continue;
    const int64_t blocks = CeilDiv(tiles, w) * parts;
    const int64_t waves = CeilDiv(blocks, per_sm * sms);
    const bool fills = blocks >= sms;
    if (best == 0 || waves < best_waves || (waves == best_waves && fills && !best_fills)) {
      best = w;
      best_waves = waves;
      best_fills = fills;
    }
  }
  return best;
}

// The wgmma kernel takes the tuning's column range. Below 17 columns (the
// narrow kernels' launches: n8 / n16 tiles through the wide path) only from
// kWgNarrowMinTiles tiles on: a block a tile wins on small matrices (round
// 43, 9-16 columns: 1024 x 5120 5.7-5.9 us on mma.sync against 9.4-9.6,
// 8192 x 5120 22.3-23.0 against 17.3-17.7).
bool WgTakes(GgmlType type, int n, int64_t tiles) {
  const Tuning& t = GetTuning();
  return n >= t.wgmma_min_cols && n <= t.wgmma_max_cols && WgRuns(type) && (MmvWide(n) || tiles >= kWgNarrowMinTiles);
}
}  // namespace

size_t MmvScratchBytes(GgmlType type, int64_t tiles, int64_t k) {
  const mmv::Plan plan = MmvPlan(type, tiles, k);
  return plan.tile_warps > 1 ? static_cast<size_t>(plan.tile_warps) * kWideCols * tiles * mmv::kTileRows * 4 : 0;
}
size_t MmvScratchCounters(int64_t tiles) { return static_cast<size_t>(CeilDiv(tiles, 2)); }  // 2 warps a block at least
bool MmvWide(int n) { return n > 16; }

cudaError_t LaunchMmv(GgmlType type, const MmvMatrix* mats, int n_mats, int64_t k, const void* xq, int n,
                      const MmvScratch& scratch, cudaStream_t s) {
  if (n < 1 || n > kMmvMaxCols || n_mats < 1 || n_mats > kMmvMaxMats) return cudaErrorInvalidValue;
  MmvParams p{};
  int64_t tiles = 0;
  for (int i = 0; i < n_mats; ++i) {
    p.m[i] = {static_cast<const uint8_t*>(mats[i].w), mats[i].rows, tiles, mats[i].bias, mats[i].y};
    tiles += mmv::Tiles(mats[i].rows);
  }
  p.plan = MmvPlan(type, tiles, k);
  p.n_mats = n_mats;
  p.n = n;
  p.xq = static_cast<const uint8_t*>(xq);
  p.xq_ct = static_cast<size_t>(mmv::Groups(k)) * mmv::xq::kRec;
  p.tiles = tiles;
  const bool wg = WgTakes(type, n, tiles);
  if (MmvWide(n) || wg) {
    const int64_t parts = p.plan.tile_warps;
    if (parts > 1 && (scratch.part_bytes < MmvScratchBytes(type, tiles, k) ||
                      scratch.counters < MmvScratchCounters(tiles)))
      return cudaErrorInvalidValue;
    const int w = WideWarps(type, tiles, parts, wg);
    if (w == 0) return cudaErrorInvalidConfiguration;  // no wide block fits the device's shared memory
    cudaError_t err = cudaErrorInvalidValue;
    DispatchPacked(type, [&]<GgmlType T>() {
      const dim3 grid(static_cast<unsigned>(CeilDiv(tiles, w)), static_cast<unsigned>(parts));
      if constexpr (WgType<T>()) {
        if (wg) {
          const int cts = static_cast<int>(CeilDiv(n, 8));  // column tiles: 1-4 (n <= kMmvMaxCols)
          auto* k = cts == 1   ? MmvKernelWideWg<T, 1>
                    : cts == 2 ? MmvKernelWideWg<T, 2>
                    : cts == 3 ? MmvKernelWideWg<T, 3>
                               : MmvKernelWideWg<T, 4>;
          err = LaunchPdl(k, grid, dim3(32 * w), WgSmem<T>(w, cts), s, p, scratch);
          return;
        }
      }
      err = n <= 24 ? LaunchPdl(MmvKernelWide<T, 3>, grid, dim3(32 * w), WideSmem<T>(w, 3), s, p, scratch)
                    : LaunchPdl(MmvKernelWide<T, 4>, grid, dim3(32 * w), WideSmem<T>(w, 4), s, p, scratch);
    });
    return err;
  }
  cudaError_t err = cudaErrorInvalidValue;
  DispatchPacked(type, [&]<GgmlType T>() {
    const dim3 grid(static_cast<unsigned>(tiles)), block(static_cast<unsigned>(32 * p.plan.tile_warps));
    const size_t w = static_cast<size_t>(p.plan.tile_warps);
    err = n <= 4   ? LaunchPdl(PairedKernel<T>(), grid, block, w * MmvSmemPerWarp<T, kPaired>(), s, p)
          : n <= 8 ? LaunchPdl(MmvKernel5to8<T>, grid, block, w * MmvSmemPerWarp<T, 1>(), s, p)
                   : LaunchPdl(MmvKernel9to16<T>, grid, block, w * MmvSmemPerWarp<T, 2>(), s, p);
  });
  return err;
}

cudaError_t PrepareMatvecKernels() {
  cudaError_t e = cudaSuccess;
  const int64_t sms = GetDeviceInfo().sm_count;
  // Whether this build has sm_90a code for the device (the wgmma kernel).
  int wg_ok = 0;
  {
    int* d = nullptr;
    if ((e = cudaMalloc(&d, sizeof(int))) != cudaSuccess) return e;
    WgProbeKernel<<<1, 1>>>(d);
    e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaMemcpy(&wg_ok, d, sizeof(int), cudaMemcpyDeviceToHost);
    cudaFree(d);
    if (e != cudaSuccess) return e;
  }
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K,
                     GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K})
    DispatchPacked(t, [&]<GgmlType T>() {
      // The ring of a whole block of warps may pass the default 48 KiB.
      const int most = static_cast<int>(
          kTileMaxWarps * std::max({MmvSmemPerWarp<T, kPaired>(), MmvSmemPerWarp<T, 1>(), MmvSmemPerWarp<T, 2>()}));
      for (auto* k : {PairedKernel<T>(), MmvKernel5to8<T>, MmvKernel9to16<T>})
        if (e == cudaSuccess) e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, most);
      for (int w = 1; w <= kTileMaxWarps && e == cudaSuccess; ++w) {
        int paired = 0, five = 0;
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&paired, PairedKernel<T>(), 32 * w,
                                                          w * MmvSmemPerWarp<T, kPaired>());
        if (e == cudaSuccess)
          e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&five, MmvKernel5to8<T>, 32 * w,
                                                            w * MmvSmemPerWarp<T, 1>());
        g_resident[static_cast<int>(T) & 63][w] = int64_t{std::min(paired, five)} * w * sms;
      }
      // The wide kernel's largest block that fits (on sm_86/89's 99 KiB a
      // Q8_0 block of 8 warps does not); sizes beyond it are never launched.
      const size_t optin = static_cast<size_t>(GetDeviceInfo().smem_optin);
      size_t wide = 0;
      for (int l = 0; l < 3; ++l)
        if (WideSmem<T>(2 << l, kWideCols / 8) <= optin) wide = WideSmem<T>(2 << l, kWideCols / 8);
      for (auto* k : {MmvKernelWide<T, 3>, MmvKernelWide<T, 4>})
        if (e == cudaSuccess && wide > 0)
          e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(wide));
      for (int l = 0; l < 3 && e == cudaSuccess; ++l) {
        int blocks = 0;
        if (wide > 0 && WideSmem<T>(2 << l, kWideCols / 8) <= wide)
          e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, MmvKernelWide<T, 4>, 32 * (2 << l),
                                                            WideSmem<T>(2 << l, kWideCols / 8));
        g_wide_blocks[static_cast<int>(T) & 63][l] = blocks;
      }
      if constexpr (WgType<T>()) {
        // As the mma.sync kernel's: the largest block (4 or 8 warps) that fits, then the blocks an SM.
        size_t most = 0;
        for (int l = 1; l < 3; ++l)
          if (wg_ok && WgSmem<T>(2 << l, 4) <= optin) most = WgSmem<T>(2 << l, 4);
        for (auto* k : {MmvKernelWideWg<T, 1>, MmvKernelWideWg<T, 2>, MmvKernelWideWg<T, 3>, MmvKernelWideWg<T, 4>})
          if (e == cudaSuccess && most > 0)
            e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(most));
        for (int l = 1; l < 3 && e == cudaSuccess; ++l) {
          int blocks = 0;
          if (most > 0 && WgSmem<T>(2 << l, 4) <= most)
            e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, MmvKernelWideWg<T, 4>, 32 * (2 << l),
                                                              WgSmem<T>(2 << l, 4));
          g_wg_blocks[static_cast<int>(T) & 63][l] = blocks;
        }
      }
    });
  return e;
}

bool MatvecWgmmaRuns(GgmlType type) { return WgRuns(type); }
bool MatvecWgmmaTakes(GgmlType type, int n, int64_t rows) { return WgTakes(type, n, mmv::Tiles(rows)); }

cudaError_t LaunchDequantPacked(GgmlType type, const void* packed, int64_t k, const int32_t* row_ids, int64_t r0,
                                int64_t nrows, void* dst, int64_t ld, bool to_f16, cudaStream_t s) {
  const int64_t blocks = CeilDiv(nrows, kDequantRows) * mmv::Groups(k);
  if (blocks <= 0) return cudaSuccess;
  const bool ok = DispatchPacked(type, [&]<GgmlType T>() {
    LaunchPdl(DequantPackedKernel<T>, dim3(blocks), dim3(32 * kDequantRows), 0, s,
              static_cast<const uint8_t*>(packed), k, row_ids, r0, nrows, dst, ld, to_f16);
  });
  return ok ? LaunchResult() : cudaErrorInvalidValue;
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
