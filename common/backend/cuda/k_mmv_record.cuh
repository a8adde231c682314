// The packed tile records (common/quant/mmv_tiles.h) as a lane reads them:
// its share of a (16-row tile, 256-element group) record's planes and per-row
// scales, the int8 A fragments of a unit, the k-quants' decoded scales.
// Shared by the matvec kernels (k_matvec.cu) and the prompt GEMM (k_qgemm.cu).
#pragma once
#include <cuda_fp16.h>

#include <cstdint>

#include "common/backend/cuda/k_common.cuh"
#include "common/quant/mmv_tiles.h"

namespace specd::cuda {
namespace {

using mmv::Layout;

// ---- loads ----
// Weights: streamed once from global memory into the warp's shared ring
// (cp.async.cg: L2 only); a lane then reads its fragments there.
__device__ __forceinline__ uint4 LdS(const uint8_t* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ uint32_t LdS32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ uint32_t LdS16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }

__device__ __forceinline__ uint32_t Word(const uint4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// ---- one group of a tile, one lane's share ----
// Registers of the planes and of the aux data of rows g and g + 8. Members a
// type does not use are never touched (and cost no registers).
struct WRegs {
  uint4 p4[4];
  uint4 p2[2];
  uint4 p1;
  uint4 p8[8];
  uint4 a[2][2];
  uint32_t b[2];
};

// Reads the lane's share of a record (in shared memory); kCodes = false: its
// scales only (the wide kernel reads the codes unit by unit, GroupKWide).
template <GgmlType T, bool kCodes = true>
__device__ __forceinline__ void LoadW(const uint8_t* rec, int lane, WRegs& w) {
  constexpr Layout l = mmv::LayoutOf(T);
  auto v4 = [&](int off) { return LdS(rec + off); };
  auto v1 = [&](int off) { return LdS32(rec + off); };
  if constexpr (kCodes && l.p4 >= 0) {
#pragma unroll
    for (int c = 0; c < 4; ++c) w.p4[c] = v4(l.p4 + 512 * c + 16 * lane);
  }
  if constexpr (kCodes && l.p2 >= 0) {
#pragma unroll
    for (int q = 0; q < 2; ++q) w.p2[q] = v4(l.p2 + 512 * q + 16 * lane);
  }
  if constexpr (kCodes && l.p1 >= 0) w.p1 = v4(l.p1 + 16 * lane);
  if constexpr (kCodes && l.p8 >= 0) {
#pragma unroll
    for (int u = 0; u < 8; ++u) w.p8[u] = v4(l.p8 + 512 * u + 16 * lane);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = (lane >> 2) + 8 * h;
    const int a = l.aux_a + l.aux_a_row * row;
    if constexpr (l.aux_a_row == 16) {
      w.a[h][0] = v4(a);
    } else if constexpr (l.aux_a_row == 32) {
      w.a[h][0] = v4(a);
      w.a[h][1] = v4(a + 16);
    } else if constexpr (l.aux_a_row == 12) {
      w.a[h][0] = make_uint4(v1(a), v1(a + 4), v1(a + 8), 0u);
    }
    if constexpr (l.aux_b_row == 4) w.b[h] = v1(l.aux_b + 4 * row);
    else if constexpr (l.aux_b_row == 2) w.b[h] = LdS16(rec + l.aux_b + 2 * row);
  }
}

// Power of two by which the device's A bytes exceed mmv::DotCode: signed codes
// are kept in the top bits of the byte (no sign extension needed), and d is
// divided by the same power (exact), so the results are the emulator's.
template <GgmlType T>
constexpr float CodeScale() {
  return T == GgmlType::Q4_0 ? 16.0f : T == GgmlType::Q5_0 ? 8.0f : T == GgmlType::Q6_K ? 4.0f
                                    : T == GgmlType::Q3_K ? 32.0f : 1.0f;
}
template <GgmlType T>
constexpr bool SignedA() {
  return T == GgmlType::Q8_0 || T == GgmlType::Q4_0 || T == GgmlType::Q5_0 || T == GgmlType::Q6_K ||
         T == GgmlType::Q3_K;
}

// The codes of A register j of unit u as stored, a byte each, unsigned (the
// type's offset not applied; Q8_0: its int8 bytes). u, j compile-time after
// unrolling.
template <GgmlType T>
__device__ __forceinline__ uint32_t StoredCodes(const WRegs& w, int u, int j) {
  constexpr Layout l = mmv::LayoutOf(T);
  if constexpr (T == GgmlType::Q8_0) return Word(w.p8[u], j);
  uint32_t nib = 0, two = 0, one = 0;
  if constexpr (l.p4 >= 0) nib = (Word(w.p4[u >> 1], j) >> (4 * (u & 1))) & 0x0F0F0F0Fu;
  if constexpr (l.p2 >= 0) two = (Word(w.p2[u >> 2], u & 3) >> (2 * j)) & 0x03030303u;
  if constexpr (l.p1 >= 0) one = (Word(w.p1, u >> 1) >> (4 * (u & 1) + j)) & 0x01010101u;
  if constexpr (T == GgmlType::Q3_K) return two | (one << 2);
  if constexpr (l.p2 >= 0 && l.p4 >= 0) return nib | (two << 4);  // Q6_K
  if constexpr (l.p2 >= 0) return two;                           // Q2_K
  if constexpr (l.p1 >= 0) return nib | (one << 4);              // Q5_0, Q5_1, Q5_K
  return nib;
}

// A register j of unit u: the stored codes as the integer MMA's A bytes
// (signed codes offset and kept in the byte's top bits, CodeScale).
template <GgmlType T>
__device__ __forceinline__ uint32_t AReg(const WRegs& w, int u, int j) {
  const uint32_t c = StoredCodes<T>(w, u, j);
  if constexpr (T == GgmlType::Q4_0) return (c ^ 0x08080808u) << 4;
  if constexpr (T == GgmlType::Q5_0) return (c ^ 0x10101010u) << 3;
  if constexpr (T == GgmlType::Q6_K) return (c ^ 0x20202020u) << 2;
  if constexpr (T == GgmlType::Q3_K) return (c ^ 0x04040404u) << 5;
  return c;
}

__device__ __forceinline__ int Byte(uint32_t w, int i) { return (w >> (8 * i)) & 0xFF; }
__device__ __forceinline__ int SByte(uint32_t w, int i) { return static_cast<int8_t>((w >> (8 * i)) & 0xFF); }
__device__ __forceinline__ float HalfLo(uint32_t w) { return H2F(static_cast<uint16_t>(w & 0xFFFFu)); }
__device__ __forceinline__ float HalfHi(uint32_t w) { return H2F(static_cast<uint16_t>(w >> 16)); }

// Per-row (h = 0: row g, 1: row g + 8) scales of a k-quant group, decoded once.
struct KScales {
  uint32_t sc[2][4];  // unit scales as bytes (32-units: words 0-1; 16-units: words 0-3)
  uint32_t mn[2][4];  // unit mins as bytes, same packing (formats with mins)
  float d[2], off[2];
};

template <GgmlType T>
__device__ __forceinline__ void DecodeK(const WRegs& w, KScales& s) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint4 a = w.a[h][0];
    if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
      s.sc[h][0] = a.y & 0x3F3F3F3Fu;
      s.sc[h][1] = (a.w & 0x0F0F0F0Fu) | ((a.y >> 2) & 0x30303030u);
      s.mn[h][0] = a.z & 0x3F3F3F3Fu;
      s.mn[h][1] = ((a.w >> 4) & 0x0F0F0F0Fu) | ((a.z >> 2) & 0x30303030u);
      s.d[h] = HalfLo(a.x);
      s.off[h] = -HalfHi(a.x);
    } else if constexpr (T == GgmlType::Q6_K) {
#pragma unroll
      for (int i = 0; i < 4; ++i) s.sc[h][i] = Word(a, i);  // int8 scales
      s.d[h] = __fmul_rn(HalfLo(w.b[h]), 1.0f / CodeScale<T>());
      s.off[h] = 0.0f;
    } else if constexpr (T == GgmlType::Q2_K) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s.sc[h][i] = Word(a, i) & 0x0F0F0F0Fu;
        s.mn[h][i] = (Word(a, i) >> 4) & 0x0F0F0F0Fu;
      }
      s.d[h] = HalfLo(w.b[h]);
      s.off[h] = -HalfHi(w.b[h]);
    } else if constexpr (T == GgmlType::Q3_K) {
      // 16 six-bit scales from 12 bytes (as GetScaleQ3K), kept as unsigned
      // bytes; the -32 is applied per unit.
      const uint32_t a0 = a.x, a1 = a.y, tmp = a.z;
      s.sc[h][0] = (a0 & 0x0F0F0F0Fu) | ((tmp & 0x03030303u) << 4);
      s.sc[h][1] = (a1 & 0x0F0F0F0Fu) | (((tmp >> 2) & 0x03030303u) << 4);
      s.sc[h][2] = ((a0 >> 4) & 0x0F0F0F0Fu) | (((tmp >> 4) & 0x03030303u) << 4);
      s.sc[h][3] = ((a1 >> 4) & 0x0F0F0F0Fu) | (((tmp >> 6) & 0x03030303u) << 4);
      s.d[h] = __fmul_rn(HalfLo(w.b[h]), 1.0f / CodeScale<T>());
      s.off[h] = 0.0f;
    }
  }
}
template <GgmlType T>
__device__ __forceinline__ int KUnitScale(const KScales& s, int h, int u) {
  if constexpr (T == GgmlType::Q6_K) return SByte(s.sc[h][u >> 2], u & 3);
  if constexpr (T == GgmlType::Q3_K) return Byte(s.sc[h][u >> 2], u & 3) - 32;
  return Byte(s.sc[h][u >> 2], u & 3);
}

}  // namespace
}  // namespace specd::cuda
