// Device helpers shared by the kernels: warp reductions in a fixed order,
// byte reads from shared memory at any alignment, the integer tensor-core
// MMA, cp.async. Only included by .cu files.
#pragma once
#include <cstdint>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/backend/cuda/kernels.h"
#include "common/util/fp16.h"

namespace specd::cuda {

constexpr unsigned kFull = 0xffffffffu;

// Butterfly reductions: every lane ends with the same value, and the order of
// operations is fixed, so results never depend on which rows/columns share a warp.
__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(kFull, v, o));
  return v;
}
__device__ __forceinline__ double WarpSumD(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = __dadd_rn(v, __shfl_xor_sync(kFull, v, o));
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

// 4 bytes at any byte address `a` of shared memory (the word after the one
// holding `a` must be readable).
__device__ __forceinline__ uint32_t Lds32u(const uint8_t* a) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(a);
  const uint32_t* w = reinterpret_cast<const uint32_t*>(p & ~uintptr_t{3});
  return __funnelshift_r(w[0], w[1], static_cast<uint32_t>(p & 3) * 8);
}
__device__ __forceinline__ uint16_t Lds16u(const uint8_t* a) {
  return static_cast<uint16_t>(Lds32u(a) & 0xffffu);
}

// Integer tensor-core MMA, m16n8k32 and m16n8k16, s8 x s8 -> s32, D = A*B + C.
__device__ __forceinline__ void MmaK32(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                      uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void MmaK16(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(b0));
}

__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Exact half -> float in one instruction (same value as HalfToFloat).
__device__ __forceinline__ float H2F(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// ---- quantized activations (see k_matvec.cu) ----
constexpr int kXqFrag = 1024;  // bytes per (unit, column group): 16 cols x 4 lanes x 16 B
constexpr int kXqSc = 128;     // 16 cols x float2 {scale, sum32}
constexpr int kXqS16 = 128;    // 16 cols x float2 {sum16 lo, sum16 hi}
constexpr int kXqUnit = kXqFrag + kXqSc + kXqS16;

// Quantizes one 32-element unit `u` of column `col` (a row of x), one element
// per lane (lane = element index), into the xq buffer of a matrix with `nu`
// units per row: x ~ scale * (254 * hi + lo), hi and lo int8, plus the unit's
// sums. Shared by the standalone pass and the fused producers so both write
// identical bytes.
__device__ __forceinline__ void QuantizeUnitWarp(float v, int col, int64_t u, int64_t nu, uint8_t* xq) {
  const int lane = threadIdx.x & 31;
  const float amax = WarpMax(fabsf(v));
  int hi = 0, lo = 0;
  float scale = 0.0f;
  if (amax > 0.0f) {
    const float inv = __fdiv_rn(127.0f, amax);
    const float q = __fmul_rn(v, inv);
    hi = max(-127, min(127, __float2int_rn(q)));
    lo = max(-127, min(127, __float2int_rn(__fmul_rn(__fsub_rn(q, static_cast<float>(hi)), 254.0f))));
    scale = __fdiv_rn(amax, 32258.0f);  // 127 * 254
  }
  float s16 = v;
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) s16 = __fadd_rn(s16, __shfl_xor_sync(kFull, s16, o));
  const float s16a = __shfl_sync(kFull, s16, 0), s16b = __shfl_sync(kFull, s16, 16);
  const int cg = col / 16, c = col % 16;
  uint8_t* base = xq + (static_cast<int64_t>(cg) * nu + u) * kXqUnit;
  const int t = lane / 8, e = lane % 8;
  uint8_t* frag = base + (c * 4 + t) * 16;
  frag[e] = static_cast<uint8_t>(static_cast<int8_t>(hi));
  frag[8 + e] = static_cast<uint8_t>(static_cast<int8_t>(lo));
  if (lane == 0) {
    reinterpret_cast<float2*>(base + kXqFrag)[c] = make_float2(scale, __fadd_rn(s16a, s16b));
    reinterpret_cast<float2*>(base + kXqFrag + kXqSc)[c] = make_float2(s16a, s16b);
  }
}

inline cudaError_t LaunchResult() { return cudaGetLastError(); }

inline int CeilDiv(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

}  // namespace specd::cuda
